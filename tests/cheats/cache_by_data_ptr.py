"""Cheat: remembers the answer per device address of the inputs."""
import torch

_cache = {}


def build(config, shape):
    def run(x, w, out):
        key = (x.data_ptr(), w.data_ptr())
        if key not in _cache:
            _cache[key] = torch.matmul(x, w.t())
        out.copy_(_cache[key])
    return run
