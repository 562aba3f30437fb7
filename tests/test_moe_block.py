"""bench/moe_block.py on the CPU: the tiny spec under Triton's interpreter runs all four paths (stock, stock_graph,
tuned, tuned_side) and writes its file; the tuned paths agree with the stock block; winners of a service
tuning file become the block's configs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# M = 1's shared and routed experts from the GEMV files (named in the block config), M = 3's from the default files
GEMV_AT_1 = {
    "shared_expert": {
        "1": {"file": "shared_expert_gemv", "BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4,
              "BLOCK_N2": 16, "BLOCK_K2": 64, "num_warps2": 2},
        "3": {}},
    "moe_experts": {
        "1": {"file": "moe_experts_gemv", "BLOCK_N": 4, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 2, "BLOCK_N2": 2,
              "BLOCK_K2": 64, "num_warps2": 1, "PDL": 0},
        "3": {}},
    # the shared expert as the 33rd expert: the same two files take the longer rows
    "moe_experts_shared": {
        "1": {"file": "moe_experts_gemv", "BLOCK_N": 4, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 2, "BLOCK_N2": 2,
              "BLOCK_K2": 64, "num_warps2": 1, "PDL": 0},
        "3": {}}}


def test_tiny_block_runs_every_path_and_matches_stock(tmp_path: Path) -> None:
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps(GEMV_AT_1))
    out = subprocess.run([sys.executable, "bench/moe_block.py", "--device", "cpu", "--spec", "tiny", "--batches", "1,3",
                          "--reps", "1", "--configs", str(configs), "--out", str(tmp_path)], cwd=REPO,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "moe_block.json").read_text())
    assert doc["spec_name"] == "tiny" and doc["device"]["name"] == "cpu" and doc["commit"]
    assert [r["M"] for r in doc["rows"]] == [1, 3]
    for r in doc["rows"]:
        for path in ("stock", "stock_graph", "tuned", "tuned_side", "tuned_shared_fused"):
            assert r[path]["median_us"] > 0 and r[path]["graph"] is False
        # one router + experts pass for routed and shared: the same top-k, the block's output within tolerance
        assert r["shared_fused_ids_match_tuned"] is True and r["speedup_tuned_shared_fused_vs_stock_graph"] > 0
        assert r["side_stream"] is False  # a CPU has no second stream: the row says so
        # bf16 kernels against the bf16 torch block: within the slots' own check tolerances
        assert max(r["rel_l2_vs_stock"].values()) < 0.03, r["rel_l2_vs_stock"]
        assert r["topk_set_match"] == 1.0
        assert set(r["topk_set_match_vs_fp32_logits"]) == {"tuned", "stock"}
        assert r["speedup_tuned_vs_stock_graph"] > 0 and r["side_stream_gain"] > 0
    assert [r["files"]["shared_expert"] for r in doc["rows"]] == ["shared_expert_gemv", "shared_expert_fused"]
    assert [r["files"]["moe_experts"] for r in doc["rows"]] == ["moe_experts_gemv", "moe_experts_grouped"]
    assert [r["files"]["shared_fused"]["file"] for r in doc["rows"]] == ["moe_experts_gemv", "moe_experts_grouped"]


def test_winners_of_a_tuning_file_become_the_block_configs() -> None:
    spec = importlib.util.spec_from_file_location("kt_moe_block", REPO / "bench" / "moe_block.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # session F: add_rmsnorm, router and shared_expert won buckets with the block's own variant files
    configs = mod.configs_from_tuning(REPO / "bench" / "results" / "2026-12-03-h200-decode-tuning-f.json")
    assert set(configs) == {"add_rmsnorm", "router", "shared_expert"}
    assert configs["router"]["1"]["EPILOGUE"] == "fused" and configs["router"]["4"]["EPILOGUE"] == "separate"
    assert mod.pick(configs, "router", 2) == configs["router"]["1"]   # the largest winning M <= 2
    assert mod.pick(configs, "router", 64) == configs["router"]["64"]
    assert mod.pick(configs, "moe_experts", 1) == {}                   # no winner: the variant's default


def test_winners_of_a_resumed_db_are_found_along_the_resume_chain(tmp_path: Path) -> None:
    """Session R resumed Q's DB (which resumed P's, ... K's): R's file lists only its own jobs, yet its winners
    table holds K's add_rmsnorm and shared_expert winners and N/Q's searched MoE and router configs."""
    spec = importlib.util.spec_from_file_location("kt_moe_block", REPO / "bench" / "moe_block.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    results = REPO / "bench" / "results"
    configs = mod.configs_from_tuning(results / "2026-12-03-h200-decode-tuning-r.json")
    assert set(configs) == {"add_rmsnorm", "router", "shared_expert", "moe_experts"}
    assert configs["moe_experts"]["1"]["num_warps"] == 8 and configs["moe_experts"]["1"]["BLOCK_N2"] == 128  # Q's search
    # a winner no file along the chain names is an error, not a silent fall back to the default config
    doc = json.loads((results / "2026-12-03-h200-decode-tuning-r.json").read_text())
    doc["command"] = "bench/service_tuning.py --plan x.json"  # the chain cut: K-Q's variants unknown
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="no results file"):
        mod.configs_from_tuning(cut)


def test_a_winner_from_another_triton_file_of_the_slot_is_named_in_its_config() -> None:
    """The final H200 table gives the shared expert's buckets 1 and 2 to shared_expert_gemv and the larger
    ones to shared_expert_fused (MODULES' file), and the routed experts' buckets 1-4 to moe_experts_gemv and
    the larger ones to moe_experts_grouped: the block must build each bucket from its own winner's file."""
    spec = importlib.util.spec_from_file_location("kt_moe_block", REPO / "bench" / "moe_block.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    configs = mod.configs_from_tuning(REPO / "bench" / "results" / "2026-12-04-h200-decode-tuning-zh.json")
    shared = configs["shared_expert"]
    assert shared["1"][mod.FILE_KEY] == shared["2"][mod.FILE_KEY] == "shared_expert_gemv"
    assert shared["1"]["PDL"] == 1
    assert all(mod.FILE_KEY not in shared[m] for m in ("4", "16", "64"))  # MODULES' own file
    routed = configs["moe_experts"]
    assert {routed[m][mod.FILE_KEY] for m in ("1", "2", "4")} == {"moe_experts_gemv"}
    assert routed["1"]["SPLIT_K"] == 1 and routed["1"]["PDL"] == 1  # session ZE's one-split w13
    assert all(mod.FILE_KEY not in routed[m] for m in ("16", "64"))
    assert all(mod.FILE_KEY not in c for slot in ("router", "add_rmsnorm") for c in configs[slot].values())
    router = configs["router"]
    assert {c["TOPK"] for c in router.values()} == {"bitonic"}  # sessions ZG-ZH: the bitonic top-k everywhere
    assert router["1"]["EPILOGUE"] == "separate" and router["1"]["EPI_WARPS"] == 4
