"""bench/plans/make_s26.py's to make_s30.py's plans ask only for runs the service takes: each item, planned as
POST /v1/jobs plans it (the item's deployment, its shapes, the variant's space read from the file as the service
reads it), gives one run per config, shape and batch size. The service drops a config that a shape or M does not
admit without a word, so a plan that lost runs that way would spend a device call on less than it says."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.service_tuning import item_deployment
from kernels.catalogue import get_slot
from kernels.deployment import Deployment, batch_bucket
from kernels.variant_meta import declared_space
from search.space import ConfigSpace
from service.routers.jobs import _plan

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("session", "card", "runs"), [("s26", "h200", 88), ("s26", "h100", 26), ("s27", "h200", 102),
                                                       ("s27", "h100", 14), ("s28", "h200", 170),
                                                       ("s28", "h100", 69), ("s29", "h200", 195),
                                                       ("s29", "h100", 19), ("s30", "h100", 2)])
def test_every_config_of_the_session_plans_is_a_run(session: str, card: str, runs: int) -> None:
    plan = json.loads((REPO / f"bench/plans/{session}_{card}.json").read_text())
    total = 0
    for item in plan["variants"]:
        dep = Deployment(**item_deployment(plan, item))
        shapes = [s for s in get_slot(item["slot"]).shapes(dep) if s.name in item.get("shapes", [s.name])]
        space = ConfigSpace.parse(declared_space((REPO / item["file"]).read_text()))
        configs = item.get("configs", "all")
        planned = _plan(space, configs, shapes, dep.token_counts(), 10_000)
        if configs != "all":
            assert len(planned) == len(configs) * len(shapes) * len(dep.token_counts()), item
        total += len(planned)
    assert total == runs


@pytest.mark.parametrize("session", ["s26", "s27", "s28", "s29", "s30"])
def test_make_writes_the_plans_in_the_repo(session: str) -> None:
    written = sorted((REPO / "bench/plans").glob(f"{session}_*.json"))  # the cards' plans and any part of one
    before = {p.name: p.read_text() for p in written}
    out = subprocess.run([sys.executable, f"bench/plans/make_{session}.py"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    after = {p.name: p.read_text() for p in written}
    assert after == before


def test_s28_fills_the_untuned_buckets_only() -> None:
    # make_s28's own part: runs at M = 8 and 32 only (buckets 5-8 and 17-32), a row tile tied to M moved to fit it;
    # on the H200 it is s28_h200_buckets.json, which s28_h200.json starts with
    buckets = json.loads((REPO / "bench/plans/s28_h200_buckets.json").read_text())["variants"]
    assert json.loads((REPO / "bench/plans/s28_h200.json").read_text())["variants"][:len(buckets)] == buckets
    for items in (json.loads((REPO / "bench/plans/s28_h100.json").read_text())["variants"], buckets):
        assert {m for item in items for m in item["batch_sizes"]} == {8, 32}
        tiles = {c["BLOCK_M"] for item in items if item["file"].endswith("dense_gemm_splitk.py") and item["batch_sizes"] == [32]
                 for c in item["configs"]}
        assert tiles == {32}  # both cards run dense_gemm_splitk.py at M = 32, its 16-row tile moved to 32


@pytest.mark.parametrize(("card", "table"), [("h200", "2026-12-06-h200-decode-tuning-s25"),
                                             ("h100", "2026-12-07-h100-decode-tuning-h100-s28")])
def test_s29_times_only_buckets_its_table_has_no_verdict_for(card: str, table: str) -> None:
    part = "s29_h200_gaps" if card == "h200" else "s29_h100"
    plan = json.loads((REPO / f"bench/plans/{part}.json").read_text())
    db = sqlite3.connect(f"file:{REPO / 'bench/results' / table}.sqlite?mode=ro&immutable=1", uri=True)
    verdicts = set(db.execute("SELECT slot, shape_name, batch_bucket FROM winners WHERE hardware = ?", (card,)))
    planned = set()
    for item in plan["variants"]:
        shapes = item.get("shapes") or [s.name for s in get_slot(item["slot"]).shapes(Deployment(**item_deployment(plan, item)))]
        planned |= {(item["slot"], shape, batch_bucket(m)) for shape in shapes for m in item["batch_sizes"]}
    assert planned and not planned & verdicts
    # bucket 2 of the dense GEMMs, which no plan before had timed on either card
    assert {("dense_gemm", shape, "2") for shape in ("fused_qkv_a", "q_b_proj", "o_proj", "lm_head")} <= planned


def test_s29_h200_is_s28_h200_with_the_new_gaps_before_its_backlog() -> None:
    s28 = json.loads((REPO / "bench/plans/s28_h200.json").read_text())["variants"]
    s28_gaps = json.loads((REPO / "bench/plans/s28_h200_buckets.json").read_text())["variants"]
    gaps = json.loads((REPO / "bench/plans/s29_h200_gaps.json").read_text())["variants"]
    s29 = json.loads((REPO / "bench/plans/s29_h200.json").read_text())["variants"]
    assert gaps[:len(s28_gaps)] == s28_gaps  # the same picks for 5-8 and 17-32, first
    assert s29 == gaps + s28[len(s28_gaps):]


def test_s30_fills_the_bucket_one_move_could_not() -> None:
    """h100-s29-checks has one bucket with no verdict, rmsnorm_gemm 33-64: make_s30 times it at M = 64, in configs of
    M = 32 moved twice (the 64-row tile, then a parameter of the register budget it breaks), each one the service
    takes there; make_s29's one move gives none."""
    from bench.plans.make_s28 import at_m
    from bench.plans.make_s30 import fits

    plan = json.loads((REPO / "bench/plans/s30_h100.json").read_text())
    [item] = plan["variants"]
    assert (item["slot"], item["batch_sizes"]) == ("rmsnorm_gemm", [64])
    db = sqlite3.connect(f"file:{REPO / 'bench/results/2026-12-07-h100-decode-tuning-h100-s29-checks'}.sqlite"
                         "?mode=ro&immutable=1", uri=True)
    assert ("33-64",) not in set(db.execute("SELECT batch_bucket FROM winners WHERE slot = 'rmsnorm_gemm'"))
    m32 = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 6, "num_warps": 4, "num_stages": 2}
    file = item["file"]
    assert at_m(file, m32, "q_a_norm_q_b_proj", 64) is None
    moved = fits(file, m32, "q_a_norm_q_b_proj", 64)
    assert moved and all(c["BLOCK_M"] == 64 and sum(c[k] != m32[k] for k in m32) == 2 for c in moved)
    assert all(c["BLOCK_M"] == 64 for c in item["configs"])


def test_s34_h200_is_what_session_33s_cut_step_left() -> None:
    """make_s34 reads the cut step's log: its 68 submissions are s29_h200's items in order, and the items whose jobs
    were cancelled at the deadline (32) make s34_h200.json, rmsnorm_gemm 33-64 (no H200 verdict yet) among them."""
    from bench.plans.make_s34 import LOG, PLAN, cancelled_items

    plan = json.loads((REPO / PLAN).read_text())
    items = cancelled_items(plan, (REPO / LOG).read_text())
    assert json.loads((REPO / "bench/plans/s34_h200.json").read_text())["variants"] == items
    assert len(items) == 32 and all(item in plan["variants"] for item in items)
    assert any(item["slot"] == "rmsnorm_gemm" and item["batch_sizes"] == [64] for item in items)
    db = sqlite3.connect(f"file:{REPO / 'bench/results/2026-12-07-h200-decode-tuning-s33.sqlite'}?mode=ro&immutable=1",
                         uri=True)
    assert ("rmsnorm_gemm", "q_a_norm_q_b_proj", "33-64") not in set(
        db.execute("SELECT slot, shape_name, batch_bucket FROM winners WHERE hardware = 'h200'"))
