"""Cheat: leaves the outputs unwritten, hoping the checker's buffers hold the answer."""


def build(config, shape):
    def run(x, w, out):
        pass
    return run
