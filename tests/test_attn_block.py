"""bench/attn_block.py on the CPU: the attention input's three paths run under Triton's interpreter and agree
with stock; the tuned kernels of a tuning file's winners are found along its --resume-db chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
        for path in ("stock", "stock_fused_norm", "tuned"):
            assert r[path]["median_us"] > 0
        for path, errs in r["rel_l2_vs_stock"].items():
            assert max(errs.values()) < 2e-2, (path, errs)


def test_tuned_kernels_come_from_the_final_table() -> None:
    import attn_block

    configs = attn_block.configs_from_tuning(str(REPO / "bench/results/2026-12-03-h200-decode-tuning-r.json"))
    assert configs["fused_qkv_a"]["1"][0] == "dense_gemm_gemv" and configs["fused_qkv_a"]["4"][0] == "dense_gemm_splitk"
    assert sorted(configs["rmsnorm_gemm"], key=int) == ["1", "4", "16"]
    assert attn_block.pick(configs, "fused_qkv_a", 8, None) == configs["fused_qkv_a"]["4"]
    assert attn_block.pick({}, "fused_qkv_a", 1, None) == [None, {}]  # no winner: cuBLAS
