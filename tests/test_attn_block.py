"""bench/attn_block.py on the CPU: the attention input's three paths run under Triton's interpreter and agree
with stock; the tuned kernels of a tuning file's winners are found along its --resume-db chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

SMALL = {"add_rmsnorm": {"1": ["add_rmsnorm_fused", {"BLOCK_H": 256, "num_warps": 4}]},
         "fused_qkv_a": {"1": ["dense_gemm_gemv", {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 128, "SPLIT_K": 2,
                                                   "num_warps": 2, "num_stages": 2}],
                         "3": ["dense_gemm_splitk", {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 2,
                                                     "num_warps": 4, "num_stages": 2, "REDUCE": "last_cta"}]},
         "rmsnorm_gemm": {"1": ["rmsnorm_gemm_fused", {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 2,
                                                       "num_warps": 4, "num_stages": 2}]}}


def test_every_path_runs_and_matches_stock(tmp_path: Path) -> None:
    (tmp_path / "small.json").write_text(json.dumps(SMALL))
    out = subprocess.run([sys.executable, "bench/attn_block.py", "--device", "cpu", "--dims", "256,128,64,16,96",
                          "--configs", str(tmp_path / "small.json"), "--sets", "2", "--reps", "1", "--batches", "1,3",
                          "--out", str(tmp_path)], cwd=REPO, env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "attn_block.json").read_text())
    assert doc["device"]["name"] == "cpu" and doc["commit"] and doc["dims"]["q_lora_rank"] == 128
    assert [r["M"] for r in doc["rows"]] == [1, 3]
    # M=1 runs the GEMV, M=3 the split-K kernel: the largest winning M <= 3 is 3
    assert [r["tuned_kernels"]["fused_qkv_a"][0] for r in doc["rows"]] == ["dense_gemm_gemv", "dense_gemm_splitk"]
    for r in doc["rows"]:
        for path in ("stock", "stock_fused_norm", "tuned", "tuned_kv_apart"):
            assert r[path]["median_us"] > 0
        # no mla_norms_gemm winner in SMALL: the kv latent's norm rides in the rmsnorm_gemm winner's kernel, and the
        # path that normalises it apart runs beside it
        assert r["tuned_kernels"]["mla_norms_gemm"] == ["rmsnorm_gemm_fused", SMALL["rmsnorm_gemm"]["1"][1],
                                                       "config of the rmsnorm_gemm winner"]
        assert r["tuned_kv_apart_kernels"]["rmsnorm_gemm"] == SMALL["rmsnorm_gemm"]["1"]
        assert r["speedup_tuned_vs_tuned_kv_apart"] > 0
        for path, errs in r["rel_l2_vs_stock"].items():
            assert max(errs.values()) < 2e-2, (path, errs)


def test_tuned_kernels_come_from_the_final_table() -> None:
    import attn_block

    configs = attn_block.configs_from_tuning(str(REPO / "bench/results/2026-12-03-h200-decode-tuning-r.json"))
    assert configs["fused_qkv_a"]["1"][0] == "dense_gemm_gemv" and configs["fused_qkv_a"]["4"][0] == "dense_gemm_splitk"
    assert sorted(configs["rmsnorm_gemm"], key=int) == ["1", "4", "16"]
    assert attn_block.pick(configs, "fused_qkv_a", 8, None) == configs["fused_qkv_a"]["4"]
    assert attn_block.pick({}, "fused_qkv_a", 1, None) == [None, {}]  # no winner: cuBLAS


def test_a_cute_winner_is_run_and_an_unknown_file_is_refused(tmp_path: Path) -> None:
    import attn_block

    # the H100 table where the CuTe K-split GEMV won fused_qkv_a at M = 1 and 4 (an earlier version of this
    # script dropped those winners and timed the 9-16 bucket's split-K kernel in their place)
    results = REPO / "bench/results/2026-12-05-h100-decode-tuning-h100-zl.json"
    configs = attn_block.configs_from_tuning(str(results))
    assert configs["fused_qkv_a"]["1"][0] == configs["fused_qkv_a"]["4"][0] == "dense_gemm_ksplit_gemv"
    assert attn_block.load("dense_gemm_ksplit_gemv").__file__.endswith("variants/cute/dense_gemm_ksplit_gemv.py")
    doc = json.loads(results.read_text())
    vid = next(v for v, f in doc["variant_files"].items() if f.endswith("dense_gemm_ksplit_gemv.py"))
    doc["variant_files"][vid] = "kernels/variants/cute/some_new_gemv.py"
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="won by some_new_gemv, which bench/attn_block.py cannot run"):
        attn_block.configs_from_tuning(str(renamed))


def test_every_triton_and_cute_dense_gemm_file_is_one_the_block_can_run() -> None:
    """A new dense_gemm kernel that wins fused_qkv_a must not stop the block (it refuses files it does not know)."""
    import attn_block

    stems = {p.stem for lang in ("triton", "cute") for p in (REPO / "kernels/variants" / lang).glob("dense_gemm_*.py")}
    assert stems == set(attn_block.GEMM_FILES)


def test_a_norm_gemm_config_that_does_not_hold_this_m_passes_to_the_kernels_other_slot() -> None:
    """rmsnorm_gemm was tuned up to M = 16 (16-row tiles), mla_norms_gemm up to 64: at M = 20 the kv-apart path runs
    the same kernel with the mla_norms_gemm winner's config and says so; with neither holding M, a clear error."""
    import attn_block

    mla_cfg = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 4, "num_stages": 2}
    configs = {"rmsnorm_gemm": SMALL["rmsnorm_gemm"], "mla_norms_gemm": {"17": ["rmsnorm_gemm_fused", mla_cfg]}}
    dims = (256, 128, 64, 16, 96)
    *_, used = attn_block.build_kernels(20, dims, configs, kv_fused=False)
    assert used["rmsnorm_gemm"] == ["rmsnorm_gemm_fused", mla_cfg, "config of the mla_norms_gemm winner"]
    *_, used = attn_block.build_kernels(20, dims, configs)
    assert used["mla_norms_gemm"] == ["rmsnorm_gemm_fused", mla_cfg]
    with pytest.raises(SystemExit, match="holds M=40"):
        attn_block.build_kernels(40, dims, configs)
