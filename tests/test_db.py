"""db/: migrations, dedup, fan-out, write-once results, claims, leases, winners, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.models import Base, Job, Run, Winner, utcnow
from db.queries.jobs import PlannedRun, cancel_job, create_job, derive_state, job_progress
from db.queries.leaderboard import leaderboard
from db.queries.runs import claim_run, mark_enqueued, record_result, stale_runs
from db.queries.variants import get_or_create_variant
from db.queries.winners import list_winners
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from search.space import ConfigSpace

SOURCE = "def build(config, shape):\n    raise NotImplementedError\n"
Result = Callable[..., dict[str, Any]]


def make_job(session: Session, configs: list[dict[str, Any]], batch_sizes: tuple[int, ...] = (1, 3, 4),
             hardware: str = "cpu", source: str = SOURCE) -> tuple[Job, list[str]]:
    variant, _ = get_or_create_variant(session, slot="dense_gemm", language="torch", source=source,
                                       config_space={"BLOCK": [64, 128, 256]}, constraints=[], n_points=3,
                                       author="alice", agent="agent-x")
    dep = Deployment(spec="tiny-moe", tp=1, batch_sizes=list(batch_sizes))
    shapes = get_slot("dense_gemm").shapes(dep)
    return create_job(session, variant=variant, deployment=dep.model_dump(mode="json"), model_name=dep.model_name,
                      hardware=hardware, configs_requested=configs, shape_filter=None, submitted_by="alice",
                      plan=[PlannedRun(c, ConfigSpace.canonical(c), s, m)
                            for c in configs for s in shapes for m in dep.token_counts()],
                      queued_lease_seconds=3600)


def run_id(session: Session, job: Job, block: int, shape: str, m: int) -> str:
    return session.scalars(select(Run.id).where(Run.job_id == job.id, Run.config_key == ConfigSpace.canonical({"BLOCK": block}),
                                                Run.shape_name == shape, Run.m == m)).one()


def winner(session: Session, shape_key: str, bucket: str, hardware: str = "cpu") -> Winner:
    session.expire_all()
    return session.scalars(select(Winner).filter_by(slot="dense_gemm", shape_key=shape_key, batch_bucket=bucket,
                                                    hardware=hardware)).one()


# --- schema -----------------------------------------------------------------------------------------

def test_migrations_match_models(engine: Engine) -> None:
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == [], f"migration and models differ: {diff}"
    downgrade(engine, "base")
    assert current_revision(engine) is None
    upgrade(engine=engine)
    upgrade(engine=engine)  # a second start is a no-op
    assert current_revision(engine) == head_revision()


def test_sqlite_connection_settings(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite pragmas")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000


def test_postgres_backends_name_their_process(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL application_name")
    with engine.connect() as conn:
        name = conn.execute(text("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()")).scalar()
    assert name == f"kerneltune:{os.getpid()}"


# --- variants and jobs ----------------------------------------------------------------------------------

def test_variant_dedup_by_content_hash(session: Session) -> None:
    kw: dict[str, Any] = dict(config_space={"B": [1]}, constraints=[], n_points=1, author="a")
    v1, created1 = get_or_create_variant(session, slot="dense_gemm", language="torch", source=SOURCE, **kw)
    v2, created2 = get_or_create_variant(session, slot="dense_gemm", language="torch", source=SOURCE,
                                         **{**kw, "author": "b"})
    v3, created3 = get_or_create_variant(session, slot="dense_gemm", language="triton", source=SOURCE, **kw)
    assert (created1, created2, created3) == (True, False, True)
    assert v1.id == v2.id and v2.author == "a" and v3.id != v1.id
    assert v1.content_hash != v3.content_hash and len(v1.content_hash) == 64


def test_job_fan_out_counts(session: Session) -> None:
    configs = [{"BLOCK": 64}, {"BLOCK": 128}]
    job, ids = make_job(session, configs, batch_sizes=(1, 3, 4))
    # tiny-moe at TP1 gives dense_gemm 4 shapes; Ms 1, 3, 4.
    assert len(ids) == len(set(ids)) == 2 * 4 * 3
    runs = session.scalars(select(Run).where(Run.job_id == job.id)).all()
    assert {r.batch_bucket for r in runs} == {"1", "3-4"}
    assert {r.shape_name for r in runs} == {"fused_qkv_a", "q_b_proj", "o_proj", "lm_head"}
    assert all(r.status == "queued" and r.slot == "dense_gemm" and r.hardware == "cpu" for r in runs)
    assert len({r.seed for r in runs}) > 1  # fresh random inputs per run
    assert job.queue == "kt.cpu" and job.model_name == "tiny-moe"


def test_progress_and_state_are_derived(session: Session, run_result: Result) -> None:
    job, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    assert len(ids) == 4
    p = job_progress(session, [job.id])[job.id]
    assert (p.total, p.queued, derive_state(job, p)) == (4, 4, "queued")
    claim_run(session, ids[0], "w1", 60)
    p = job_progress(session, [job.id])[job.id]
    assert (p.running, derive_state(job, p)) == (1, "running")
    record_result(session, ids[0], run_result(ids[0]))
    record_result(session, ids[1], run_result(ids[1], verdict="check_failed"))
    p = job_progress(session, [job.id])[job.id]
    assert (p.done, p.by_verdict, derive_state(job, p)) == (2, {"passed": 1, "check_failed": 1}, "running")
    for rid in ids[2:]:
        record_result(session, rid, run_result(rid, verdict="timeout"))
    p = job_progress(session, [job.id])[job.id]
    assert (p.done, derive_state(job, p)) == (4, "done")


def test_cancel_cancels_queued_runs_only(session: Session, run_result: Result) -> None:
    job, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    running = claim_run(session, ids[0], "w1", 60)
    assert running is not None
    assert cancel_job(session, job.id) == 3
    assert session.get(Job, job.id).cancelled  # type: ignore[union-attr]
    assert claim_run(session, ids[1], "w2", 60) is None  # workers skip cancelled runs
    assert record_result(session, ids[1], run_result(ids[1])) is False
    assert record_result(session, ids[0], run_result(ids[0])) is True  # the running one finishes
    p = job_progress(session, [job.id])[job.id]
    assert (p.done, p.cancelled, derive_state(session.get(Job, job.id), p)) == (1, 3, "cancelled")  # type: ignore[arg-type]


# --- workers' calls -------------------------------------------------------------------------------------

def test_record_result_is_write_once(session: Session, run_result: Result) -> None:
    _, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    rid = ids[0]
    assert claim_run(session, rid, "w1", 60) is not None
    assert record_result(session, rid, run_result(rid, median_us=10.0)) is True
    # A redelivered task with other numbers: no-op, the first result stands.
    assert record_result(session, rid, run_result(rid, verdict="crashed")) is False
    session.expire_all()
    run = session.get(Run, rid)
    assert run is not None
    assert (run.status, run.verdict, run.median_us, run.speedup, run.speedup_ci_lo) == ("done", "passed", 10.0, 2.0, 1.5)
    assert run.check["trials"][0]["seed"] == 11 and run.fingerprint_id == "cpu-test-0"
    assert run.lease_expires_at is None and run.finished_at is not None
    assert session.scalar(select(Run.id).where(Run.status == "done").limit(2)) == rid


def test_record_result_validates(session: Session, run_result: Result) -> None:
    _, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    with pytest.raises(ValueError, match="verdict"):
        record_result(session, ids[0], {**run_result(ids[0]), "verdict": "great"})
    with pytest.raises(ValueError, match="not"):
        record_result(session, ids[0], run_result(ids[1]))
    assert session.get(Run, ids[0]).status == "queued"  # type: ignore[union-attr]


def test_result_from_other_hardware_is_an_error(session: Session, run_result: Result) -> None:
    _, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,), hardware="h200")
    assert record_result(session, ids[0], run_result(ids[0], hardware_class="cpu")) is True
    run = session.get(Run, ids[0])
    assert run is not None and (run.verdict, run.reason_code) == ("error", "hardware_mismatch")


def test_claim_run_skips_done_cancelled_and_leased(session: Session, run_result: Result) -> None:
    job, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    a, b, c, d = ids
    run = claim_run(session, a, "w1", 60)
    assert run is not None and run.status == "running" and run.worker == "w1" and run.attempts == 1
    assert run.variant.source == SOURCE  # loaded for the task
    assert claim_run(session, a, "w2", 60) is None  # another worker holds a live lease
    record_result(session, a, run_result(a))
    assert claim_run(session, a, "w2", 60) is None  # done
    assert claim_run(session, "no-such-run", "w2", 60) is None
    # An expired lease (dead worker) may be taken over.
    past = utcnow() - timedelta(hours=1)
    assert claim_run(session, b, "w1", 60, now=past) is not None
    again = claim_run(session, b, "w2", 60)
    assert again is not None and again.worker == "w2" and again.attempts == 2
    cancel_job(session, job.id)
    assert claim_run(session, c, "w2", 60) is None and claim_run(session, d, "w2", 60) is None


def test_stale_runs_lists_expired_leases(session: Session) -> None:
    _, ids = make_job(session, [{"BLOCK": 64}], batch_sizes=(1,))
    now = utcnow()
    assert stale_runs(session, now) == []  # fresh delivery leases
    later = now + timedelta(seconds=3601)
    assert {r.id for r in stale_runs(session, later)} == set(ids)
    claim_run(session, ids[0], "w1", 60, now=now)
    mark_enqueued(session, ids[1:3], 7200, now=now)
    # The claimed run's 60 s lease ran out too: its worker died, or it would have renewed.
    assert {r.id for r in stale_runs(session, later)} == {ids[0], ids[3]}
    assert {r.id for r in stale_runs(session, now + timedelta(seconds=61))} == {ids[0]}
    assert {r.id for r in stale_runs(session, now + timedelta(seconds=7201))} == set(ids)


# --- winners --------------------------------------------------------------------------------------------

def test_winner_is_fastest_run_beating_stock_beyond_noise(session: Session, run_result: Result) -> None:
    job, _ = make_job(session, [{"BLOCK": 64}, {"BLOCK": 128}, {"BLOCK": 256}], batch_sizes=(1,))
    r64, r128, r256 = (run_id(session, job, b, "o_proj", 1) for b in (64, 128, 256))
    record_result(session, r64, run_result(r64, median_us=9.0, ci=(1.3, 1.6)))
    record_result(session, r128, run_result(r128, median_us=7.0, ci=(1.1, 1.9)))
    # Fastest of all, but its CI reaches below 1: not beyond noise.
    record_result(session, r256, run_result(r256, median_us=5.0, ci=(0.98, 2.0)))
    key = session.get(Run, r64).shape_key  # type: ignore[union-attr]
    w = winner(session, key, "1")
    assert (w.is_stock, w.run_id, w.shape_name) == (False, r128, "o_proj")
    [listed] = [x for x in list_winners(session, slot="dense_gemm", hardware="cpu") if x.shape_key == key]
    assert listed.run is not None and listed.run.variant.author == "alice"
    assert listed.run.fingerprint is not None and listed.run.fingerprint.hardware_class == "cpu"


def test_stock_is_winner_when_nothing_beats_it(session: Session, run_result: Result) -> None:
    job, _ = make_job(session, [{"BLOCK": 64}, {"BLOCK": 128}], batch_sizes=(1,))
    r64, r128 = (run_id(session, job, b, "lm_head", 1) for b in (64, 128))
    record_result(session, r64, run_result(r64, median_us=20.0, baseline_us=19.0, ci=(0.9, 1.0)))
    record_result(session, r128, run_result(r128, verdict="check_failed"))
    w = winner(session, session.get(Run, r64).shape_key, "1")  # type: ignore[union-attr]
    assert (w.is_stock, w.run_id) == (True, None)


def test_config_failing_at_one_m_of_the_bucket_cannot_win(session: Session, run_result: Result) -> None:
    job, _ = make_job(session, [{"BLOCK": 64}, {"BLOCK": 128}], batch_sizes=(1, 3, 4))
    a3, a4 = run_id(session, job, 64, "o_proj", 3), run_id(session, job, 64, "o_proj", 4)
    b3, b4 = run_id(session, job, 128, "o_proj", 3), run_id(session, job, 128, "o_proj", 4)
    key = session.get(Run, a3).shape_key  # type: ignore[union-attr]
    record_result(session, a3, run_result(a3, median_us=5.0))
    assert winner(session, key, "3-4").run_id == a3
    record_result(session, a4, run_result(a4, verdict="check_failed"))  # same config, other M of the bucket
    assert winner(session, key, "3-4").is_stock
    record_result(session, b3, run_result(b3, median_us=8.0))
    record_result(session, b4, run_result(b4, median_us=9.0))
    assert winner(session, key, "3-4").run_id == b3
    # Bucket "1" is separate and untouched by the bucket 3-4 results.
    assert session.scalar(select(Winner).filter_by(shape_key=key, batch_bucket="1")) is None


def test_concurrent_results_of_one_bucket_keep_the_fastest(session_factory: sessionmaker[Session],
                                                            run_result: Result) -> None:
    configs = [{"BLOCK": b} for b in (64, 128, 256)]
    with session_factory() as s:
        job, _ = make_job(s, configs, batch_sizes=(3, 4))
        ids = [run_id(s, job, c["BLOCK"], "q_b_proj", m) for c in configs for m in (3, 4)]
        key = s.get(Run, ids[0]).shape_key  # type: ignore[union-attr]
    medians = {rid: 30.0 - i for i, rid in enumerate(ids)}

    def write(rid: str) -> bool:
        with session_factory() as s:
            return record_result(s, rid, run_result(rid, median_us=medians[rid]))

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert all(pool.map(write, ids))
    with session_factory() as s:
        assert winner(s, key, "3-4").run_id == min(medians, key=medians.__getitem__)


def test_leaderboard_ranks_passing_runs_per_shape_and_m(session: Session, run_result: Result) -> None:
    job, _ = make_job(session, [{"BLOCK": 64}, {"BLOCK": 128}, {"BLOCK": 256}], batch_sizes=(1,))
    r = {b: run_id(session, job, b, "o_proj", 1) for b in (64, 128, 256)}
    record_result(session, r[64], run_result(r[64], median_us=9.0))
    record_result(session, r[128], run_result(r[128], median_us=7.0, uses_library=True))
    record_result(session, r[256], run_result(r[256], verdict="crashed"))
    [group] = leaderboard(session, slot="dense_gemm", hardware="cpu", model="tiny-moe", shape="o_proj")
    assert [(e.rank, e.run.id) for e in group.entries] == [(1, r[128]), (2, r[64])]
    assert group.m == 1 and group.batch_bucket == "1" and group.entries[0].run.uses_library is True
    assert leaderboard(session, model="deepseek-v3") == []


def test_embedded_sqlite_file_is_owner_only(tmp_path) -> None:
    from db.session import make_engine

    path = tmp_path / "sub" / "kt.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    engine.dispose()
    assert path.stat().st_mode & 0o777 == 0o600
