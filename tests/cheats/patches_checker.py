"""Cheat: makes the slot's correctness rule accept anything, then returns zeros."""
from kernels.slots.base import CheckOutcome
from kernels.slots.dense_gemm import DenseGemm

DenseGemm.check = lambda self, shape, outputs, ref, inputs: CheckOutcome(True, "", 0.0, 0.0)


def build(config, shape):
    def run(x, w, out):
        out.zero_()
    return run
