"""Cheat: makes the stock baseline slower by rebinding torch.matmul, keeping the real one for itself."""
import time

import torch

_real = torch.matmul


def _slow(*args, **kwargs):
    time.sleep(0.001)
    return _real(*args, **kwargs)


torch.matmul = _slow


def build(config, shape):
    def run(x, w, out):
        _real(x, w.t(), out=out)
    return run
