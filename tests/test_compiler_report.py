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
