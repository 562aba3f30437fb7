"""Cheat: computes the answer, then zeroes its activation input (a later reference would see zeros)."""
import torch


def build(config, shape):
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
        x.zero_()
    return run
