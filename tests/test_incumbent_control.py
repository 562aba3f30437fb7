"""The bucket's incumbent timed beside a challenger (workers/bench.py, RunSpec.control) and what winners rank
by (db/queries/runs.py ranked_us): a challenger displaces the incumbent it was timed with exactly when it beat
it in the same rounds, whatever the two sessions' clocks did; a control that cannot build or run is left out
and never fails the challenger."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.models import Run, Winner
from db.queries.runs import record_result
from db.queries.winners import incumbent_run
from kernels.backends.base import source_hash
from tests.evaluation_helpers import SHIPPED, run_source
from tests.test_winners_incremental import make_runs
from workers.protocol import BenchSettings, ControlSpec, Verdict

Result = Callable[..., dict[str, Any]]
BENCH = BenchSettings(min_rounds=12, max_rounds=40, min_time_s=0.0)

# The same library call, made three times: a clearly slower incumbent.
SLOW = '''import torch


def build(config, shape):
    def run(x, w, out):
        for _ in range(3):
            torch.matmul(x, w.t(), out=out)
    return run
'''


def control(source: str, run_id: str = "incumbent-run", language: str = "torch") -> ControlSpec:
    return ControlSpec(run_id=run_id, language=language, source=source, source_hash=source_hash(source),
                       config={}, declares_library=False)


def test_incumbent_is_timed_in_the_same_rounds(data_dir: Path) -> None:
    r = run_source(SHIPPED, data_dir, m=8, bench=BENCH, control=control(SLOW))
    assert r.verdict == Verdict.passed, r.reason
    b = r.bench
    assert b.control_run_id == "incumbent-run" and b.control_error is None
    assert b.control_median_us is not None and b.control_median_us > 1.5 * b.median_us
    assert b.vs_control == pytest.approx(b.control_median_us / b.median_us)
    assert 1.5 < b.vs_control_ci_lo <= b.vs_control <= b.vs_control_ci_hi
    # and the other way round: a faster incumbent (the shipped kernel) beside the slow challenger
    r = run_source(SLOW, data_dir, m=8, bench=BENCH, control=control(SHIPPED))
    assert r.verdict == Verdict.passed, r.reason
    assert r.bench.vs_control_ci_hi < 1.0


@pytest.mark.parametrize("source,why", [
    ("def build(config, shape):\n    raise ValueError('gone')\n", "did not build"),
    ("def build(config, shape):\n    def run(x, w, out):\n        raise RuntimeError('no')\n    return run\n",
     "raised on its first call"),
    ("import torch\n\ndef build(config, shape):\n    n = [0]\n    def run(x, w, out):\n        n[0] += 1\n"
     "        if n[0] > 3:\n            raise RuntimeError('late')\n        torch.matmul(x, w.t(), out=out)\n"
     "    return run\n", "raised while timed"),
])
def test_a_broken_incumbent_is_left_out_and_the_challenger_still_passes(data_dir: Path, source: str, why: str) -> None:
    r = run_source(SHIPPED, data_dir, m=4, bench=BENCH, control=control(source))
    assert r.verdict == Verdict.passed, r.reason
    assert r.bench.control_run_id == "incumbent-run" and why in (r.bench.control_error or "")
    assert r.bench.control_median_us is None and r.bench.vs_control is None
    assert r.bench.n >= BENCH.min_rounds and r.bench.speedup > 0


def test_an_unknown_incumbent_language_is_left_out(data_dir: Path) -> None:
    spec = control(SLOW).model_copy(update={"language": "cute"})  # no CuTe DSL on a CPU machine
    r = run_source(SHIPPED, data_dir, m=4, bench=BENCH, control=spec)
    assert r.verdict == Verdict.passed, r.reason
    assert r.bench.control_median_us is None and r.bench.control_error


def with_control(res: dict[str, Any], control_run_id: str, control_median_us: float,
                 ci: tuple[float, float] | None = None) -> dict[str, Any]:
    """A harness result (conftest's run_result) as if timed beside ``control_run_id`` (no CI: the point estimate)."""
    b = res["bench"]
    b.update(control_run_id=control_run_id, control_median_us=control_median_us,
             vs_control=control_median_us / b["median_us"], vs_control_ci_lo=ci[0] if ci else None,
             vs_control_ci_hi=ci[1] if ci else None)
    return res


def _winner(session: Session) -> str | None:
    session.expire_all()
    return session.scalars(select(Winner.run_id)).one()


def test_head_to_head_decides_across_sessions(session: Session, run_result: Result) -> None:
    """Incumbent A at 5.0 us (session 1). B, in a session 10% slower, took 5.3 us beside A's 5.5: it beat A and
    wins although 5.3 > 5.0. C, in a faster session, took 4.9 us beside B's (A's successor) 4.6: it lost to B
    in its rounds and does not win although 4.9 is the lowest median of the three."""
    a, b, c = make_runs(session, variants=1, configs=3, ms=(1,), jobs=1)
    record_result(session, a, run_result(a, median_us=5.0))
    assert _winner(session) == a
    record_result(session, b, with_control(run_result(b, median_us=5.3), a, 5.5))
    assert _winner(session) == b
    assert session.get(Run, b).ranked_us == pytest.approx(5.3 * 5.0 / 5.5)
    record_result(session, c, with_control(run_result(c, median_us=4.9), b, 4.6))
    assert _winner(session) == b
    # C's time base chains through B's to A's session
    assert session.get(Run, c).ranked_us == pytest.approx(4.9 * (5.3 * 5.0 / 5.5) / 4.6)
    board = {r.id: r.ranked_us for r in session.scalars(select(Run))}
    assert sorted(board, key=board.__getitem__) == [b, a, c]


def test_a_win_inside_the_head_to_head_ci_keeps_the_incumbent(session: Session, run_result: Result) -> None:
    """As a winner must beat stock beyond noise, a challenger displaces the incumbent it was timed beside only
    beyond noise: a 2% win with a CI reaching below 1 ranks level with the incumbent, which keeps the bucket."""
    a, b, c = make_runs(session, variants=1, configs=3, ms=(1,), jobs=1)
    record_result(session, a, run_result(a, median_us=5.0))
    record_result(session, b, with_control(run_result(b, median_us=4.9), a, 5.0, (0.99, 1.05)))
    assert _winner(session) == a and session.get(Run, b).ranked_us == pytest.approx(5.0)
    record_result(session, c, with_control(run_result(c, median_us=4.9), a, 5.0, (1.01, 1.05)))
    assert _winner(session) == c and session.get(Run, c).ranked_us == pytest.approx(4.9)


def test_incumbent_run_is_the_current_winner_of_another_config(session: Session, run_result: Result) -> None:
    a, b = make_runs(session, variants=1, configs=2, ms=(1,), jobs=1)
    a2, = make_runs(session, variants=1, configs=1, ms=(1,), jobs=1)  # the same (variant, config) as a, new job
    assert incumbent_run(session, session.get(Run, b)) is None  # no winner yet
    record_result(session, a, run_result(a, median_us=5.0, ci=(0.9, 1.2)))  # not beyond noise: stock wins
    assert incumbent_run(session, session.get(Run, b)) is None
    record_result(session, b, run_result(b, median_us=6.0))
    assert _winner(session) == b
    got = incumbent_run(session, session.get(Run, a2))
    assert got is not None and got.id == b and got.variant.source  # the source travels to the worker
    assert incumbent_run(session, session.get(Run, b)) is None  # never itself


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_worker_task_times_the_bucket_winner_beside_a_challenger(session: Session, run_result: Result,
                                                                    db_url: str, data_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """workers/tasks.py end to end but for the broker: the task reads the bucket's winner at claim time, the
    sandboxed child times it beside the challenger, and the result carries the control into the DB."""
    from db.queries.jobs import PlannedRun, create_job
    from db.queries.variants import get_or_create_variant
    from kernels.catalogue import get_slot
    from kernels.deployment import Deployment
    from search.space import ConfigSpace
    from workers.tasks import evaluate_run

    dep = Deployment(spec="tiny-moe", tp=1, batch_sizes=[1])
    shape = next(s for s in get_slot("dense_gemm").shapes(dep) if s.name == "o_proj")
    run_ids = {}
    for name, source in (("incumbent", SHIPPED), ("challenger", SLOW)):
        variant, _ = get_or_create_variant(session, slot="dense_gemm", language="torch", source=source,
                                           config_space={}, constraints=[], n_points=1, author="alice")
        plan = [PlannedRun({}, ConfigSpace.canonical({}), shape, 1)]
        run_ids[name] = create_job(session, variant=variant, deployment=dep.model_dump(mode="json"),
                                   model_name=dep.model_name, hardware="cpu", configs_requested="all",
                                   shape_filter=None, submitted_by="alice", plan=plan, queued_lease_seconds=3600)[1][0]
    session.commit()
    record_result(session, run_ids["incumbent"], run_result(run_ids["incumbent"], median_us=5.0))
    assert _winner(session) == run_ids["incumbent"]
    monkeypatch.setenv("KT_DATABASE_URL", db_url)
    monkeypatch.setenv("KT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KT_DEVICE", "cpu")
    assert evaluate_run(run_ids["challenger"]) == "passed"
    session.expire_all()
    run = session.get(Run, run_ids["challenger"])
    assert run is not None and run.control_run_id == run_ids["incumbent"] == run.bench["control_run_id"]
    assert run.control_median_us and run.vs_control_ci_hi is not None and run.vs_control_ci_hi < 1.0
    assert run.ranked_us == pytest.approx(run.median_us * 5.0 / run.control_median_us)
    monkeypatch.setenv("KT_CONTROL_INCUMBENT", "0")  # the operator's switch: timed with stock alone
    [again] = create_job(session, variant=run.variant, deployment=dep.model_dump(mode="json"), model_name=dep.model_name,
                         hardware="cpu", configs_requested="all", shape_filter=None, submitted_by="alice",
                         plan=[PlannedRun({}, ConfigSpace.canonical({}), shape, 1)], queued_lease_seconds=3600)[1]
    session.commit()
    assert evaluate_run(again) == "passed"
    session.expire_all()
    plain = session.get(Run, again)
    assert plain is not None and plain.control_run_id is None and plain.ranked_us == plain.median_us
    monkeypatch.setenv("KT_CONTROL_INCUMBENT", "1")  # a short timing (a search's first rung) never wins: no control
    [short] = create_job(session, variant=run.variant, deployment=dep.model_dump(mode="json"), model_name=dep.model_name,
                         hardware="cpu", configs_requested="all", shape_filter=None, submitted_by="alice",
                         plan=[PlannedRun({}, ConfigSpace.canonical({}), shape, 1)], queued_lease_seconds=3600)[1]
    session.execute(update(Run).where(Run.id == short).values(fidelity="short"))
    session.commit()
    assert evaluate_run(short) == "passed"
    session.expire_all()
    assert session.get(Run, short).control_run_id is None  # type: ignore[union-attr]
