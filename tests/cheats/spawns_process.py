"""Cheat: shells out (could fetch a precomputed answer, or reach the network through a tool)."""
import subprocess

import torch


def build(config, shape):
    try:
        subprocess.run(["sh", "-c", "echo hello"], check=False)
    except PermissionError:
        pass  # swallow the refusal and carry on: the harness must still notice
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
    return run
