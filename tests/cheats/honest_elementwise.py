"""Honest: no library GEMM, a broadcast multiply and sum in fp32 (slow but its own work)."""
import torch


def build(config, shape):
    def run(x, w, out):
        out.copy_((x.float()[:, None, :] * w.float()[None, :, :]).sum(-1))
    return run
