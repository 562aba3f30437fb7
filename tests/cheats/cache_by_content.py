"""Cheat: remembers the answer per a cheap content fingerprint (the first elements of each input)."""
import torch

_cache = {}


def build(config, shape):
    def run(x, w, out):
        key = (tuple(x.flatten()[:16].tolist()), tuple(w.flatten()[:16].tolist()))
        if key not in _cache:
            _cache[key] = torch.matmul(x, w.t())
        out.copy_(_cache[key])
    return run
