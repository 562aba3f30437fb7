"""bench/control_report.py (the head-to-head evidence of a results file, from its DB) and bench/plans/make_rerank.py
(a plan of a table's runners-up), on a DB written by record_result."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from sqlalchemy.orm import Session

from db.models import Run
from db.queries.runs import record_result
from tests.test_incumbent_control import with_control
from tests.test_winners_incremental import make_runs

REPO = Path(__file__).resolve().parents[1]
Result = Callable[..., dict[str, Any]]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_report_lists_each_head_to_head_and_what_a_median_ranking_would_do(session: Session, run_result: Result,
                                                                           db_url: str, tmp_path: Path) -> None:
    a, b, c = make_runs(session, variants=1, configs=3, ms=(1,), jobs=1)
    record_result(session, a, run_result(a, median_us=5.0))
    # b: slower session, beat a in its rounds (by median it would not have displaced a)
    record_result(session, b, with_control(run_result(b, median_us=5.3), a, 5.5, (1.02, 1.05)))
    # c: faster session, lost to b in its rounds (by median it would have displaced b)
    record_result(session, c, with_control(run_result(c, median_us=4.9), b, 4.6, (0.92, 0.95)))
    job_ids = sorted({r.job_id for r in session.query(Run)})
    db = Path(db_url.removeprefix("sqlite:///"))
    results = db.with_name("2026-12-06-cpu-decode-tuning-t.json")
    session.commit()
    # through SQLite's backup API, as bench/service_tuning.py saves its DB: a file copy misses the WAL
    with sqlite3.connect(db) as src, sqlite3.connect(results.with_suffix(".sqlite")) as dst:
        src.backup(dst)
    results.write_text(json.dumps({"what": "kerneltune service tuning: t", "date": "2026-12-06", "device": "cpu",
                                   "commit": "abc", "command": "bench/service_tuning.py --plan p.json",
                                   "jobs": [{"job_id": j} for j in job_ids]}))
    out = subprocess.run([sys.executable, str(REPO / "bench/control_report.py"), str(results)], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    doc = json.loads(results.with_name(results.stem + "-controls.json").read_text())
    got = {r["run_id"]: r for r in doc["runs"]}
    assert set(got) == {b, c}  # a was timed alone
    assert (got[b]["head_to_head"], got[b]["by_median"], got[b]["holds_bucket"]) == ("displaces", "keeps", True)
    assert (got[c]["head_to_head"], got[c]["by_median"], got[c]["holds_bucket"]) == ("keeps", "displaces", False)
    assert got[c]["incumbent_run_id"] == b and got[c]["incumbent_here_us"] == 4.6
    md = results.with_name(results.stem + "-controls.md").read_text()
    assert "2 runs timed beside an incumbent; 1 displace it head to head; ranking by absolute median would decide 2" in md
    assert "commit: `abc`" in md and "bench/control_report.py" in md


def test_rerank_plan_takes_the_runners_up_not_the_winner(tmp_path: Path) -> None:
    win_cfg, second, third = {"B": 1}, {"B": 2}, {"B": 3}
    entry = lambda rank, cfg, v=7: {"rank": rank, "variant_id": v, "config": cfg}  # noqa: E731
    table = {"plan": {"deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 4]}},
             "variant_files": {"7": "kernels/variants/triton/dense_gemm_gemv.py"},
             "winners": [{"slot": "dense_gemm", "shape_name": "o_proj", "batch_bucket": "1",
                          "evidence": {"variant_id": 7, "config": win_cfg}}],
             "leaderboard": [
                 {"slot": "dense_gemm", "shape_name": "o_proj", "m": 1, "batch_bucket": "1",
                  "entries": [entry(1, win_cfg), entry(2, second), entry(3, third, v=99)]},  # 99: no file known
                 {"slot": "dense_gemm", "shape_name": "q_b_proj", "m": 1, "batch_bucket": "1",
                  "entries": [entry(2, second)]}]}  # a shape not asked for
    src, out = tmp_path / "t.json", tmp_path / "plan.json"
    src.write_text(json.dumps(table))
    res = subprocess.run([sys.executable, str(REPO / "bench/plans/make_rerank.py"), str(src), "--shapes", "o_proj",
                          "--batches", "1,4", "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    plan = json.loads(out.read_text())
    assert plan["deployment"] == table["plan"]["deployment"]
    assert plan["variants"] == [{"file": "kernels/variants/triton/dense_gemm_gemv.py", "slot": "dense_gemm",
                                 "language": "triton", "shapes": ["o_proj"], "batch_sizes": [1], "configs": [second]}]
