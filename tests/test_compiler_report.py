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


def test_plan_preflight_lists_what_the_plan_will_run(report, tmp_path) -> None:
    """--plan: every valid (config, shape, M) of the plan's Triton and CuTe items, with an item's own batch sizes;
    a search item's configs are not known before it runs."""
    import json

    gemv = {"BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 512, "SPLIT_K": 1, "num_warps": 2, "num_stages": 0}
    plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 4, 16]},
            "variants": [
                {"file": "kernels/variants/triton/dense_gemm_gemv.py", "slot": "dense_gemm", "language": "triton",
                 "configs": [gemv, {**gemv, "BLOCK_M": 4, "BLOCK_K": 256, "SPLIT_K": 2}],
                 "shapes": ["q_b_proj", "fused_qkv_a"]},
                {"file": "kernels/variants/triton/add_rmsnorm_fused.py", "slot": "add_rmsnorm", "language": "triton",
                 "configs": [{"BLOCK_H": 8192, "num_warps": 8}], "batch_sizes": [1]},
                {"file": "kernels/variants/cute/dense_gemm_warp_gemv.py", "slot": "dense_gemm", "language": "cute",
                 "configs": [{"ROWS_PER_WARP": 1, "WARPS_PER_CTA": 4, "UNROLL": 2}], "shapes": ["o_proj"],
                 "batch_sizes": [16]},
                {"file": "kernels/variants/triton/dense_gemm_splitk.py", "slot": "dense_gemm", "language": "triton",
                 "search": {"strategy": "tpe", "budget": {"max_evals": 8}}}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    todo = report.plan_to_compile(path)
    got = sorted((Path(t["file"]).name, t["language"], t["shape"], t["m"], t["config"].get("BLOCK_M")) for t in todo)
    # the unrolled M=1 config fits q_b_proj (1536 * 5 <= 8192) but not fused_qkv_a's K=7168 in one split;
    # the M=4 one fits q_b_proj only; add_rmsnorm and the CuTe item run at their own M only; no search item
    assert got == [("add_rmsnorm_fused.py", "triton", "add_rmsnorm_hidden", 1, None),
                   ("dense_gemm_gemv.py", "triton", "q_b_proj", 1, 1), ("dense_gemm_gemv.py", "triton", "q_b_proj", 4, 4),
                   ("dense_gemm_warp_gemv.py", "cute", "o_proj", 16, None)]


def test_cute_ptx_is_whole_past_the_stored_limit(report) -> None:
    """A build stores its PTX trimmed (kernels/backends/cute_backend.PTX_LIMIT); the report assembles the whole
    text: this config's PTX is over the limit, and ptxas parses it to the end."""
    from kernels.backends.cute_backend import PTX_LIMIT

    ptx = report.ptx_of(REPO / "kernels/variants/cute/dense_gemm_warp_gemv.py", "cute",
                        {"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 4, "UNROLL": 2},
                        {"M": 64, "N": 7168, "K": 1024, "slot": "dense_gemm", "name": "o_proj", "dtype": "bfloat16"})
    assert len(ptx) > PTX_LIMIT and "trimmed" not in ptx[-200:]
    (kernel,) = report.ptxas_report(ptx)
    assert kernel["registers"] > 0 and kernel["threads"] == 128


SASS = """
        Function : kernel_a
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R9], desc[UR4][R2.64+0x10] ;
        /*0030*/                   LDG.E.U16 R8, desc[UR4][R6.64] ;
        /*0040*/                   HMMA.16816.F32.BF16 R12, R4, R8, R12 ;
        /*0050*/                   LDG.E.128 R4, desc[UR4][R2.64+0x20] ;
        Function : kernel_b
        /*0000*/                   FFMA R1, R2, R3, R4 ;
        /*0010*/                   LDG.E R4, desc[UR4][R2.64] ;
"""


def test_load_burst_counts_the_loads_before_the_first_math(report) -> None:
    assert report.load_bursts(SASS) == {"kernel_a": {"burst_loads": 3, "burst_bytes": 16 + 16 + 2},
                                        "kernel_b": {"burst_loads": 0, "burst_bytes": 0}}


@pytest.mark.parametrize(("fence", "loads"), [(1, 36), (0, None)])
def test_the_tensor_core_gemv_fence_puts_a_whole_chunk_in_the_burst(report, fence: int, loads: int | None) -> None:
    """q_b_proj M = 16, 8-row tiles, 4 warps, 12 steps in one chunk: W row g and x rows g, g + 8 per step. With
    the fence ptxas issues all 36 loads before the first MMA; without it, a few."""
    config = {"WROWS": 8, "RT": 1, "KWARPS": 4, "UNROLL": 12, "FENCE": fence}
    shape = {"M": 16, "N": 1536, "K": 1536, "slot": "dense_gemm", "name": "q_b_proj", "dtype": "bfloat16"}
    (k,) = report.ptxas_report(report.ptx_of(REPO / "kernels/variants/cute/dense_gemm_mma_gemv.py", "cute",
                                             config, shape))
    if loads is None:
        assert 0 < k["burst_loads"] < 12, k
    else:
        assert (k["burst_loads"], k["burst_bytes"]) == (loads, 16 * loads)
    assert k["burst_kib_per_sm"] == round(k["burst_bytes"] * k["threads"] * k["blocks_per_sm"] / 1024, 1)
