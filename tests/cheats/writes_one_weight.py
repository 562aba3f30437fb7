"""Cheat: computes the answer, then nudges one element of its (large) weight input: only a digest of
every word of the weights catches it, and on a large input that digest is the in-place one."""
import torch


def build(config, shape):
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
        w.view(-1)[-7] += 1.0
    return run
