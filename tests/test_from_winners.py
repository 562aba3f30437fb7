"""bench/plans/from_winners.py: the plan that re-measures one table's winners on another card, built from the
H200 table of record (ZJ). Every non-stock winner becomes exactly one run the service's job planner accepts
(bench/compiler_report.plan_to_compile runs service.routers.jobs._plan), at the M that won, with the config
completed to the file as it is now."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ZJ = REPO / "bench/results/2026-12-05-h200-decode-tuning-zj.json"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_winner_is_one_valid_run_at_its_m(tmp_path: Path) -> None:
    from_winners = load("kt_from_winners", REPO / "bench/plans/from_winners.py")
    report = load("kt_compiler_report_fw", REPO / "bench/compiler_report.py")
    out = tmp_path / "port.json"
    assert from_winners.main(["--results", str(ZJ), "--out", str(out)]) == 0
    results = json.loads(ZJ.read_text())
    winners = [w for w in results["winners"] if not w["is_stock"]]
    runs = report.plan_to_compile(out)
    assert len(runs) == len(winners) == 37
    got = sorted((r["slot"], r["shape"], r["m"]) for r in runs)
    assert got == sorted((w["slot"], w["shape_name"], w["evidence"]["m"]) for w in winners)
    by_run = {(r["shape"], r["m"]): r["config"] for r in runs}
    # fused_qkv_a M=4 won with an older dense_gemm_gemv that had KV (1 = the path the file keeps): dropped
    zj_cfg = next(w["evidence"]["config"] for w in winners if (w["shape_name"], w["batch_bucket"]) == ("fused_qkv_a", "3-4"))
    assert zj_cfg["KV"] == 1 and "KV" not in by_run[("fused_qkv_a", 4)]
    assert {k: v for k, v in zj_cfg.items() if k != "KV"} == by_run[("fused_qkv_a", 4)]
    # the router winners predate PDL: it takes the space's first value (off), the rest is the winner's
    router = by_run[("router_gate", 1)]
    assert router["PDL"] == 0 and router["TOPK"] == "bitonic"


def test_add_merges_another_plans_items_of_the_named_shapes(tmp_path: Path) -> None:
    from_winners = load("kt_from_winners", REPO / "bench/plans/from_winners.py")
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"deployment": {}, "variants": [
        {"file": "f.py", "slot": "dense_gemm", "language": "cute", "shapes": ["o_proj"], "configs": [{}]},
        {"file": "f.py", "slot": "dense_gemm", "language": "cute", "shapes": ["q_b_proj"], "configs": [{}]}]}))
    out = tmp_path / "port.json"
    from_winners.main(["--results", str(ZJ), "--out", str(out), "--add", str(extra), "--add-shape", "o_proj"])
    plan = json.loads(out.read_text())
    assert plan["deployment"] == json.loads(ZJ.read_text())["plan"]["deployment"]
    assert [i["shapes"] for i in plan["variants"] if i["file"] == "f.py"] == [["o_proj"]]


def test_file_keeps_only_the_winners_of_the_named_files(tmp_path: Path) -> None:
    """--file re-measures one table's winners of some files, as the files are now (the chained GEMVs' plan)."""
    from_winners = load("kt_from_winners", REPO / "bench/plans/from_winners.py")
    out = tmp_path / "some.json"
    ring = "kernels/variants/cute/dense_gemm_ring_gemv.py"
    ksplit = "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
    results = REPO / "bench/results/2026-12-06-h100-decode-tuning-h100-zt.json"
    assert from_winners.main(["--results", str(results), "--out", str(out), "--file", ring, "--file", ksplit]) == 0
    items = json.loads(out.read_text())["variants"]
    assert {i["file"] for i in items} == {ring, ksplit}
    assert sorted((i["shapes"][0], i["batch_sizes"][0]) for i in items if i["file"] == ksplit) == [
        ("fused_qkv_a", 1), ("o_proj", 1), ("q_b_proj", 1)]
    assert len(items) == 9 and all(len(i["configs"]) == 1 for i in items)
