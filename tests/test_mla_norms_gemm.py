"""The mla_norms_gemm slot through the real evaluation pipeline (sandboxed child, Triton's interpreter on the CPU):
rmsnorm_gemm_fused.py with the kv latent's norm in its launch passes the slot's check and is timed; a kernel that
leaves kv_out unwritten, or writes it unnormalised, is check_failed on kv_out."""

from __future__ import annotations

import pytest

from evaluation_helpers import INTERPRETED_BENCH, REPO, run_source
from kernels.slots.base import Shape
from workers.protocol import Verdict

FUSED = (REPO / "kernels/variants/triton/rmsnorm_gemm_fused.py").read_text()
SHAPE = Shape("mla_norms_gemm", "t", {"N": 64, "K": 256, "KV": 96, "eps": 1e-6})

# q through torch, the kv latent copied as it came (no norm) or not at all
KV_UNNORMED = """
import torch
def build(config, shape):
    eps = float(shape["eps"])
    def run(x, norm_weight, w, kv, kv_norm_weight, out, kv_out):
        torch.matmul(torch.nn.functional.rms_norm(x, (x.shape[-1],), norm_weight, eps), w.t(), out=out)
        kv_out.copy_(kv)
    return run
"""
KV_UNWRITTEN = KV_UNNORMED.replace("        kv_out.copy_(kv)\n", "")


@pytest.mark.parametrize("m,config", [(1, dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=2, num_warps=2)),
                                      (5, dict(BLOCK_N=16, BLOCK_K=128, SPLIT_K=1, num_warps=4))])
def test_the_fused_kernel_passes_the_pipeline(data_dir, m, config):
    r = run_source(FUSED, data_dir, language="triton", m=m, config=config, device="cpu", shape=SHAPE, seed=5,
                   timeout_s=300, bench=INTERPRETED_BENCH)
    assert r.verdict == Verdict.passed, (r.reason_code, r.reason, r.compile and r.compile.log)
    assert r.check.passed and r.bench.median_us > 0 and not r.uses_library


@pytest.mark.parametrize("source", [KV_UNNORMED, KV_UNWRITTEN], ids=["unnormed", "unwritten"])
def test_a_wrong_kv_out_fails_the_check(data_dir, source):
    r = run_source(source, data_dir, m=3, shape=SHAPE, declares_library=True)
    assert r.verdict == Verdict.check_failed and "kv_out" in r.reason, (r.reason_code, r.reason)
