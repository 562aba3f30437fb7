"""The winner a recorded result leaves (db/queries/winners.py update_winner: from the current winner and
the new run) is the winner a full recompute over the bucket picks, and the winner the definition
picks: randomized result sequences, concurrent writers, and the plan of the per-result statement.
On SQLite and PostgreSQL (tests/conftest.py)."""

from __future__ import annotations

import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

import pytest
from sqlalchemy import Engine, event, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from db.models import NON_FAILING_VERDICTS, Run, Winner, utcnow
from db.queries import winners as wq
from db.queries.jobs import PlannedRun, create_job
from db.queries.runs import record_result
from db.queries.variants import get_or_create_variant
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from search.space import ConfigSpace

Result = Callable[..., dict[str, Any]]
Key = tuple[str, str, str, str]  # slot, shape_key, batch_bucket, hardware


def make_runs(session: Session, *, variants: int, configs: int, ms: tuple[int, ...], jobs: int,
              hardware: str = "cpu") -> list[str]:
    """Queued o_proj runs: every variant x config x M, once per job (a resubmission repeats a point)."""
    dep = Deployment(spec="tiny-moe", tp=1, batch_sizes=list(ms))
    shape = next(s for s in get_slot("dense_gemm").shapes(dep) if s.name == "o_proj")
    ids: list[str] = []
    for v in range(variants):
        variant, _ = get_or_create_variant(session, slot="dense_gemm", language="torch",
                                           source=f"def build(config, shape):\n    return {v}\n",
                                           config_space={"BLOCK": list(range(configs))}, constraints=[],
                                           n_points=configs, author="alice")
        for _ in range(jobs):
            plan = [PlannedRun({"BLOCK": c}, ConfigSpace.canonical({"BLOCK": c}), shape, m)
                    for c in range(configs) for m in ms]
            ids += create_job(session, variant=variant, deployment=dep.model_dump(mode="json"),
                              model_name=dep.model_name, hardware=hardware, configs_requested="all",
                              shape_filter=None, submitted_by="alice", plan=plan, queued_lease_seconds=3600)[1]
    return ids


def buckets(session: Session) -> list[tuple[Key, str]]:
    rows = session.execute(select(Run.slot, Run.shape_key, Run.batch_bucket, Run.hardware, Run.shape_name)
                           .distinct()).all()
    return [((r[0], r[1], r[2], r[3]), r[4]) for r in rows]


def stored(session: Session, key: Key) -> tuple[str | None, bool] | None:
    session.expire_all()
    w = session.scalars(select(Winner).filter_by(slot=key[0], shape_key=key[1], batch_bucket=key[2],
                                                 hardware=key[3])).one_or_none()
    return None if w is None else (w.run_id, w.is_stock)


def full_recompute(session: Session, key: Key, shape_name: str) -> tuple[str | None, bool]:
    """recompute_winner over the whole bucket, rolled back: the stored row is left as the increments made it."""
    w = wq.recompute_winner(session, slot=key[0], shape_key=key[1], shape_name=shape_name, batch_bucket=key[2],
                            hardware=key[3])
    got = (w.run_id, w.is_stock)
    session.rollback()
    return got


def by_definition(session: Session, key: Key) -> tuple[str | None, bool]:
    """The winner as the docstring defines it, in Python: no SQL shared with the code under test."""
    session.expire_all()
    runs = session.scalars(select(Run).filter_by(slot=key[0], shape_key=key[1], batch_bucket=key[2],
                                                 hardware=key[3], status="done")).all()
    failed = {(r.variant_id, r.config_key) for r in runs if r.verdict not in NON_FAILING_VERDICTS}
    candidates = [r for r in runs if r.verdict == "passed" and r.speedup_ci_lo is not None and r.speedup_ci_lo > 1.0
                  and r.median_us is not None and r.fidelity == "full" and (r.variant_id, r.config_key) not in failed]
    if not candidates:
        return None, True
    best = min(candidates, key=lambda r: (ranked(session, r), r.finished_at, r.id))
    return best.id, False


def ranked(session: Session, run: Run) -> float:
    """A run's rank time as the docstring defines it, recomputed here: its median, carried into the time base of
    the incumbent timed beside it (that run's own rank time over the incumbent's median in these rounds)."""
    if run.control_run_id is None or not run.control_median_us:
        return float(run.median_us)  # type: ignore[arg-type]
    control = session.get(Run, run.control_run_id)
    assert control is not None and control.median_us is not None
    base = ranked(session, control)
    value = float(run.median_us) * base / run.control_median_us  # type: ignore[arg-type]
    # a win inside the head-to-head CI ranks level with the incumbent
    return max(value, base) if run.vs_control_ci_lo is not None and run.vs_control_ci_lo <= 1.0 else value


def random_result(rng: random.Random, rid: str, run_result: Result, hardware: str,
                  timed: tuple[list[str], random.Random] | None = None) -> dict[str, Any]:
    verdict = rng.choice(["passed"] * 8 + ["compiled", "check_failed", "crashed", "timeout", "compile_failed",
                                           "rejected", "error"])
    # Few distinct medians and CIs on both sides of 1: ties (broken by finished_at, then id) and borderline
    # candidates are common.
    res = run_result(rid, verdict=verdict, median_us=rng.choice([4.0, 5.0, 5.0, 6.0, 7.5]),
                     ci=(rng.choice([0.9, 1.0, 1.0 + 1e-9, 1.2, 1.2, 2.0]), 2.5),
                     hardware_class=hardware if rng.random() > 0.05 else "elsewhere")  # mismatch: error
    if res["bench"] is not None and rng.random() < 0.05:
        res["bench"]["median_us"] = None
    if res["bench"] is not None and rng.random() < 0.05:
        res["bench"]["speedup_ci_lo"] = None
    # Timed beside an earlier run (an incumbent of some moment) in a session of another speed; drawn from a
    # second generator, so the results above are the sequence they were before controls existed.
    if timed and timed[0] and res["bench"] is not None and res["bench"]["median_us"] is not None:
        earlier, crng = timed
        if crng.random() < 0.4:
            res["bench"].update(control_run_id=crng.choice(earlier), control_median_us=crng.choice([3.9, 5.0, 6.5]),
                                vs_control_ci_lo=crng.choice([None, 0.97, 1.0, 1.03]))
    return res


# controls: some results were timed beside an earlier run (ranked_us differs from the median)
@pytest.mark.parametrize("seed,controls", [(1, False), (2, False), (3, False), (4, True), (5, True)])
def test_random_results_keep_the_full_recompute_winner(session: Session, run_result: Result, seed: int,
                                                       controls: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    ids = make_runs(session, variants=2, configs=4, ms=(1, 3, 4, 5, 8), jobs=2)
    short = rng.sample(ids, len(ids) // 10)  # short timings (a search's first rung) never win
    session.execute(update(Run).where(Run.id.in_(short)).values(fidelity="short"))
    session.commit()
    rng.shuffle(ids)
    fallbacks = []
    inner = wq._recompute

    def counting(*args: Any, **kw: Any) -> Winner:
        fallbacks.append(1)
        return inner(*args, **kw)

    all_buckets = buckets(session)
    timed: list[str] = []
    crng = random.Random(seed + 1000)
    t0 = utcnow()
    for i, rid in enumerate(ids):
        now = t0 + timedelta(seconds=rng.choice([i, i, i - 1 if i else 0]))  # equal finished_at now and then
        monkeypatch.setattr(wq, "_recompute", counting)
        res = random_result(rng, rid, run_result, "cpu", (timed, crng) if controls else None)
        assert record_result(session, rid, res, now=now)
        if res["bench"] is not None and res["bench"]["median_us"] is not None and res["verdict"] == "passed":
            timed.append(rid)
        monkeypatch.setattr(wq, "_recompute", inner)
        for key, shape_name in all_buckets:
            got = stored(session, key)
            if got is None:  # no result in this bucket yet
                assert by_definition(session, key) == (None, True)
                continue
            assert got == full_recompute(session, key, shape_name) == by_definition(session, key), (i, key)
    # The sequence crowned a winner, and went through the fallback more often than once per bucket (its first
    # result); with controls, some candidate's rank time was not its median (they changed the order).
    assert any(stored(session, key) != (None, True) for key, _ in all_buckets)
    if controls:
        assert session.scalar(select(func.count()).where(Run.verdict == "passed", Run.speedup_ci_lo > 1.0,
                                                         Run.ranked_us != Run.median_us)) > 0
    else:
        assert len(fallbacks) > len(all_buckets)


def test_winner_whose_config_fails_at_another_m_gives_way_to_the_next_best(session: Session,
                                                                           run_result: Result) -> None:
    ids = make_runs(session, variants=1, configs=3, ms=(3, 4), jobs=1)
    runs = {(r.config["BLOCK"], r.m): r.id for r in session.scalars(select(Run).where(Run.id.in_(ids)))}
    key: Key = ("dense_gemm", session.get(Run, ids[0]).shape_key, "3-4", "cpu")  # type: ignore[union-attr]
    record_result(session, runs[0, 3], run_result(runs[0, 3], median_us=5.0))
    record_result(session, runs[1, 3], run_result(runs[1, 3], median_us=7.0))
    record_result(session, runs[2, 3], run_result(runs[2, 3], median_us=6.0, ci=(0.95, 1.5)))  # not beyond noise
    assert stored(session, key) == (runs[0, 3], False)
    record_result(session, runs[2, 4], run_result(runs[2, 4], verdict="crashed"))  # a loser's config fails
    assert stored(session, key) == (runs[0, 3], False)
    record_result(session, runs[0, 4], run_result(runs[0, 4], verdict="check_failed"))  # the winner's does
    assert stored(session, key) == (runs[1, 3], False)
    record_result(session, runs[1, 4], run_result(runs[1, 4], verdict="timeout"))
    assert stored(session, key) == (None, True)


def test_a_lost_winner_run_is_recomputed_not_trusted(session: Session, run_result: Result) -> None:
    """A non-stock row without a run (ON DELETE SET NULL) says nothing about the bucket: recompute."""
    ids = make_runs(session, variants=1, configs=3, ms=(1,), jobs=1)
    key: Key = ("dense_gemm", session.get(Run, ids[0]).shape_key, "1", "cpu")  # type: ignore[union-attr]
    record_result(session, ids[0], run_result(ids[0], median_us=5.0))
    session.execute(update(Winner).where(Winner.batch_bucket == "1").values(run_id=None))
    session.commit()
    record_result(session, ids[1], run_result(ids[1], median_us=8.0))
    assert stored(session, key) == (ids[0], False)


@pytest.mark.parametrize("seed", [11, 12])
def test_concurrent_pass_and_fail_of_one_config(session_factory: sessionmaker[Session], run_result: Result,
                                                seed: int) -> None:
    """A config's fast pass and its failure at another M, written at once by different workers, must not
    leave that config the winner, whichever commits first; the other results of the bucket race too."""
    rng = random.Random(seed)
    rounds = 8
    with session_factory() as s:
        for r in range(rounds):
            make_runs(s, variants=1, configs=3, ms=(5, 6), jobs=1, hardware=f"hw{r}")
        runs = {(r.hardware, r.config["BLOCK"], r.m): r.id for r in s.scalars(select(Run))}
    for r in range(rounds):
        hw = f"hw{r}"
        plan = {(0, 5): dict(median_us=1.0), (0, 6): dict(verdict="check_failed"),  # fastest, but fails at M=6
                (1, 5): dict(median_us=2.0), (1, 6): dict(median_us=2.5),
                (2, 5): dict(median_us=3.0), (2, 6): dict(verdict="crashed")}
        order = list(plan)
        rng.shuffle(order)
        barrier = threading.Barrier(len(order))

        def write(point: tuple[int, int]) -> bool:
            rid = runs[hw, *point]
            with session_factory() as s:
                barrier.wait()
                return record_result(s, rid, run_result(rid, hardware_class=hw, **plan[point]))

        with ThreadPoolExecutor(max_workers=len(order)) as pool:
            assert all(pool.map(write, order))
        with session_factory() as s:
            [(key, shape_name)] = [b for b in buckets(s) if b[0][3] == hw]
            assert stored(s, key) == (runs[hw, 1, 5], False)
            assert stored(s, key) == full_recompute(s, key, shape_name) == by_definition(s, key)


def sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def test_per_result_statement_is_point_lookups_even_as_a_generic_plan(engine: Engine,
                                                                      session_factory: sessionmaker[Session],
                                                                      run_result: Result) -> None:
    """What update_winner asks per result reaches runs through the primary key and the partial index of
    failed runs only, also in a generic plan (what PostgreSQL may cache for a statement psycopg prepared
    after 5 executions): the failed-run predicate is written with literals, which a partial index needs.
    With no other index on (variant_id, config_key) and sequential scans off, the partial index is the
    only way to the failure probe."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL plans; on SQLite the index use is shown by EXPLAIN QUERY PLAN in the report")
    with session_factory() as s:
        ids = make_runs(s, variants=1, configs=4, ms=(3, 4), jobs=1)
        record_result(s, ids[0], run_result(ids[0], median_us=5.0))
    captured: list[tuple[str, dict[str, Any]]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "CASE WHEN" in statement:
            captured.append((statement, dict(parameters)))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with session_factory() as s:
            record_result(s, ids[1], run_result(ids[1], median_us=4.0))
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    [(statement, params)] = captured
    names: list[str] = []

    def placeholder(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, statement)
    with engine.connect() as conn:
        conn.execute(text("DROP INDEX ix_runs_config_bucket"))  # rolled back below
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        conn.exec_driver_sql(f"PREPARE kt_winner_probe AS {prepared}")
        args = ", ".join(sql_literal(params[n]) for n in names)  # EXECUTE's own arguments must be typed
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN EXECUTE kt_winner_probe({args})"))
        conn.exec_driver_sql("DEALLOCATE kt_winner_probe")
        conn.rollback()
    assert "$1" in plan or "$2" in plan, plan  # it is the generic plan
    assert "ix_runs_failed_config" in plan and "pk_runs" in plan, plan
    assert "ix_runs_bucket" not in plan and "ix_runs_lease" not in plan and "Seq Scan" not in plan, plan


def test_partial_index_of_failed_runs_as_migrated(engine: Engine) -> None:
    """Migration 0006 froze the predicate that models.FAILED_RUNS_PREDICATE and winners.failing_run spell."""
    import importlib.util
    from pathlib import Path

    from db.models import FAILED_RUNS_PREDICATE

    path = Path(wq.__file__).resolve().parents[1] / "migrations" / "versions" / "0006_runs_failed_index.py"
    spec = importlib.util.spec_from_file_location("migration_0006", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    assert migration.FAILED == FAILED_RUNS_PREDICATE
    query = {"sqlite": "SELECT sql FROM sqlite_master WHERE name = 'ix_runs_failed_config'",
             "postgresql": "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_runs_failed_config'"}
    with engine.connect() as conn:
        ddl = conn.execute(text(query[engine.dialect.name])).scalar_one()
    assert "WHERE" in ddl and "done" in ddl and "compiled" in ddl, ddl
