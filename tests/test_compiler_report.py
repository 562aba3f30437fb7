"""bench/compiler_report.py: ptxas -v on AOT-compiled sm_90a PTX, and the occupancy arithmetic."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("kt_compiler_report", REPO / "bench/compiler_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("regs,threads,smem,blocks,occ,limit", [
    (31, 128, 0, 16, 1.0, "registers, threads"),  # 16 x 128 threads = 2048: both limits at once
    (82, 128, 0, 5, 0.312, "registers"),          # 82 regs -> 2816 per warp (unit 256) -> 5 blocks of 4 warps
    (32, 128, 100_000, 2, 0.125, "shared memory"),
    (16, 32, 0, 32, 0.5, "blocks"),
])
def test_occupancy_arithmetic(report, regs, threads, smem, blocks, occ, limit) -> None:
    got = report.occupancy(regs, threads, smem)
    assert (got["blocks_per_sm"], got["occupancy"], got["limited_by"]) == (blocks, occ, limit)


def test_ptxas_reports_each_kernel_of_a_multi_kernel_variant(report) -> None:
    """The MoE variant compiles its kernels into one PTX text: each module is assembled alone (ptxas
    refuses a second .version directive)."""
    ptx = report.ptx_of(REPO / "kernels/variants/triton/moe_experts_grouped.py", "triton", {},
                        {"M": 1, "E": 384, "K": 7168, "I": 256, "top_k": 8, "slot": "moe_experts",
                         "name": "moe_experts", "dtype": "bfloat16"})
    kernels = report.ptxas_report(ptx)
    assert len(kernels) >= 2 and len({k["kernel"] for k in kernels}) == len(kernels)
    for k in kernels:
        assert k["registers"] > 0 and k["threads"] in (32, 64, 128, 256, 512, 1024)
        assert 0 < k["occupancy"] <= 1 and k["spill_store_bytes"] >= 0
