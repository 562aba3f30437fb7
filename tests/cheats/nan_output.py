"""Cheat: writes NaN everywhere (NaN must never act as a wildcard)."""


def build(config, shape):
    def run(x, w, out):
        out.fill_(float("nan"))
    return run
