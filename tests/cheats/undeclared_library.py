"""Cheat: submitted as a non-torch language, but the work is torch.matmul (cuBLAS / oneDNN)."""
import torch


def build(config, shape):
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
    return run
