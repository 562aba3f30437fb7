"""bench/decode_layer.py on the CPU: the layer's four paths (attention input, o_proj, MoE block back to back) run
under Triton's interpreter at tiny shapes, each part's tuned output agrees with stock's, and o_proj's winners come
from a tuning file (cuBLAS where stock kept the bucket)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))
from test_attn_block import SMALL  # noqa: E402
from test_moe_block import GEMV_AT_1  # noqa: E402


# the tiny layer's o_proj (N = hidden 512, K = 64) with the residual add and the norm in its kernels
ORN_TINY = {"1": ["oproj_residual_norm_gemv", {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 64, "SPLIT_K": 1,
                                                "num_warps": 2, "PDL": 1, "NORM_BLOCK": 256, "norm_warps": 2}]}


def test_tiny_layer_runs_every_path_and_each_part_matches_stock(tmp_path: Path) -> None:
    (tmp_path / "attn.json").write_text(json.dumps(SMALL))
    (tmp_path / "moe.json").write_text(json.dumps(GEMV_AT_1))
    (tmp_path / "orn.json").write_text(json.dumps(ORN_TINY))
    out = subprocess.run([sys.executable, "bench/decode_layer.py", "--device", "cpu", "--tiny", "--batches", "1,3",
                          "--reps", "1", "--attn-configs", str(tmp_path / "attn.json"), "--moe-configs",
                          str(tmp_path / "moe.json"), "--oproj-norm-configs", str(tmp_path / "orn.json"),
                          "--out", str(tmp_path)], cwd=REPO,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "decode_layer.json").read_text())
    assert doc["device"]["name"] == "cpu" and doc["commit"] and doc["dims"]["hidden"] == doc["moe_spec"]["H"]
    row, row2 = doc["rows"]
    # M = 3 has no o_proj + norm config: neither its paths nor the shared-fused ones ran, and the row reports none
    assert "tuned_shared_fused" not in row2 and "tuned_best_oproj_norm" not in row2
    assert set(row2["rel_l2_vs_stock"]["moe"]) == {"tuned", "tuned_side"}
    assert set(row2["topk_set_match"]) == {"tuned_vs_stock", "tuned_vs_fp32_logits", "stock_vs_fp32_logits"}
    for path in ("stock", "stock_fused_norm", "tuned", "tuned_best", "tuned_best_oproj_norm", "tuned_shared_fused"):
        assert row[path]["median_us"] > 0
    assert "tuned_shared_fused_chain" not in row  # no chain on a CPU
    assert row["tuned_kernels"]["moe"]["shared_fused"]["file"] == "moe_experts_gemv"
    # the fused o_proj + residual + norm path: its kernel named, its outputs against fp32 torch, one kernel fewer
    # than tuned_best is not checked here (no profiler on a CPU)
    assert row["tuned_kernels"]["oproj_residual_norm"] == ORN_TINY["1"]
    assert max(row["rel_l2_vs_stock"]["oproj_residual_norm_vs_fp32"].values()) < 1e-2
    assert row["speedup_tuned_best_oproj_norm_vs_stock"] > 0
    # no chains and no second stream on a CPU: the best path is the plain one, and the row says so
    assert row["tuned_best_attention_input"] == "tuned" and row["side_stream"] is False
    assert row["tuned_kernels"]["o_proj"] == ["cuBLAS (stock kept)", {}]  # no winners file: cuBLAS
    assert row["tuned_kernels"]["moe"]["moe_experts"] == "moe_experts_gemv"
    # the floor: the weights read (each picked expert once) over the bandwidth measured in the run
    floor = row["hbm_floor"]
    assert 1 <= floor["experts_used"] <= doc["moe_spec"]["top_k"] and floor["copy_gbs"] > 0
    assert floor["floor_us"] == sum(floor["weight_bytes"].values()) / (floor["copy_gbs"] * 1e3)
    assert all(row[p]["frac_of_floor"] == floor["floor_us"] / row[p]["median_us"] for p in ("stock", "tuned_best"))
    errs = row["rel_l2_vs_stock"]
    assert max(errs["attention_input"].values()) < 2e-2 and errs["o_proj"] == 0.0
    assert max(errs["moe"].values()) < 3e-2, errs
    assert set(errs["moe"]) == {"tuned", "tuned_side", "tuned_shared_fused"}
    assert row["topk_set_match"] == {"tuned_vs_stock": 1.0, "tuned_shared_fused_vs_tuned": 1.0,
                                     "tuned_vs_fp32_logits": 1.0, "stock_vs_fp32_logits": 1.0}


def test_o_proj_winners_come_from_the_tuning_file() -> None:
    import decode_layer

    by_m = decode_layer.oproj_configs(str(REPO / "bench/results/2026-12-06-h100-decode-tuning-h100-mla-s21b.json"))
    assert by_m and all(stem in decode_layer.attn_block.GEMM_FILES for stem, _ in by_m.values())
    assert decode_layer.oproj_configs(None) == {}
    orn = decode_layer.oproj_norm_configs(str(REPO / "bench/results/2026-12-06-h100-decode-tuning-h100-mla-s21b.json"))
    assert orn and {stem for stem, _ in orn.values()} <= set(decode_layer.ORN_FILES)


def test_o_proj_runs_the_winner_of_its_own_bucket_only() -> None:
    import decode_layer

    by_m = {1: ("dense_gemm_gemv", SMALL["fused_qkv_a"]["1"][1])}
    kw = dict(n=64, k=256, by_m=by_m, dev="cpu")
    import torch
    assert decode_layer.build_oproj(1, gen=torch.Generator().manual_seed(0), **kw)[3][0] == "dense_gemm_gemv"
    # M = 2 is its own bucket, which stock kept: cuBLAS, not M = 1's kernel
    assert decode_layer.build_oproj(2, gen=torch.Generator().manual_seed(0), **kw)[3][0] == "cuBLAS (stock kept)"
