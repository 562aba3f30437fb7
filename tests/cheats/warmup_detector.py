"""Cheat: correct while being checked, garbage once the call count says the timing has started."""
import torch

CALLS_CHECKED = 6


def build(config, shape):
    calls = [0]

    def run(x, w, out):
        calls[0] += 1
        if calls[0] <= CALLS_CHECKED:
            torch.matmul(x, w.t(), out=out)
        else:
            out.fill_(1.0)
    return run
