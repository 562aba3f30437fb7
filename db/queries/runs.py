"""Run aggregate: what workers call (claim, renew, record_result) and what the sweeper calls.

Results are write-once: ``record_result`` updates a run only while it is queued or running, in one
UPDATE ... WHERE, so a redelivered task or a second worker cannot duplicate or overwrite a result.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session, selectinload

from db.models import VERDICTS, Run, utcnow
from db.queries.fingerprints import ensure_fingerprint
from db.queries.winners import update_winner


def get_run(session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def list_runs(session: Session, *, job_id: int, verdict: str | None = None, status: str | None = None,
              limit: int = 5000, offset: int = 0) -> list[Run]:
    q = (select(Run).where(Run.job_id == job_id)
         .order_by(Run.config_key, Run.shape_key, Run.m).limit(limit).offset(offset))
    if verdict is not None:
        q = q.where(Run.verdict == verdict)
    if status is not None:
        q = q.where(Run.status == status)
    return list(session.scalars(q))


def claim_run(session: Session, run_id: str, worker: str, lease_seconds: float,
              now: datetime | None = None) -> Run | None:
    """Mark the run running under ``worker`` with a lease; commits. None means skip it: the run is done,
    cancelled, unknown, or another worker holds a live lease (a duplicate delivery)."""
    now = now or utcnow()
    res = session.execute(
        update(Run)
        .where(Run.id == run_id,
               or_(Run.status == "queued",
                   and_(Run.status == "running", or_(Run.lease_expires_at.is_(None), Run.lease_expires_at < now))))
        .values(status="running", worker=worker, attempts=Run.attempts + 1, started_at=now,
                lease_expires_at=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False))
    session.commit()
    if res.rowcount != 1:
        return None
    # The variant travels with the run: the task needs its source and language after the session closes.
    return session.scalars(select(Run).where(Run.id == run_id).options(selectinload(Run.variant))
                           .execution_options(populate_existing=True)).one()


def renew_lease(session: Session, run_id: str, worker: str, lease_seconds: float,
                now: datetime | None = None) -> bool:
    """Heartbeat for long evaluations; False when the run is no longer this worker's. Commits."""
    now = now or utcnow()
    res = session.execute(update(Run).where(Run.id == run_id, Run.status == "running", Run.worker == worker)
                          .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount == 1


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def ranked_us(session: Session, bench: dict[str, Any]) -> float | None:
    """What a run ranks by among its bucket's candidates (db/queries/winners.py): its median carried into the
    time base of the incumbent it was timed beside, median x (control run's ranked_us / control's median in
    this run), whatever the two sessions' clocks did; the incumbent's own ranked_us chains further back. It
    ranks ahead of that incumbent only when it beat it beyond noise (the ratio's CI above 1), as a winner must
    beat stock: a win inside the CI ranks level with the incumbent, which keeps the bucket (it finished first),
    so a tie does not change the kernel the export ships. No control: its median."""
    median = _num(bench, "median_us")
    control_median = _num(bench, "control_median_us")
    if median is None or not control_median or not bench.get("control_run_id"):
        return median
    base = session.scalar(select(func.coalesce(Run.ranked_us, Run.median_us)).where(Run.id == bench["control_run_id"]))
    if base is None:
        return median
    ranked = median * float(base) / control_median
    lo = _num(bench, "vs_control_ci_lo")
    return max(ranked, float(base)) if lo is not None and lo <= 1.0 else ranked


def record_result(session: Session, run_id: str, result: Any, now: datetime | None = None) -> bool:
    """Store a RunResult (dict or pydantic model) if the run is still queued or running, then update
    the winner of its bucket (point lookups, whatever the bucket's size: db/queries/winners.py); one
    transaction, commits. Returns whether it wrote (False: already done or cancelled, a no-op)."""
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict or a pydantic model, got {type(result).__name__}")
    if result.get("run_id") not in (None, run_id):
        raise ValueError(f"result is for run {result.get('run_id')!r}, not {run_id!r}")
    verdict = result.get("verdict")
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    now = now or utcnow()
    reason_code, reason = result.get("reason_code"), result.get("reason")
    bench = result.get("bench") or {}
    fingerprint = result.get("fingerprint") or None
    fingerprint_id = None
    if fingerprint and fingerprint.get("hardware_key"):
        fingerprint_id = ensure_fingerprint(session, fingerprint)  # a write first: takes SQLite's lock
        hw_class = str(fingerprint.get("hardware_class") or "")
        run_hw = session.scalar(select(Run.hardware).where(Run.id == run_id))
        if run_hw is not None and hw_class and hw_class.lower() != run_hw.lower():
            # Numbers from other hardware must never rank in this hardware's bucket.
            verdict, reason_code = "error", "hardware_mismatch"
            reason = f"run queued for {run_hw!r} was measured on {hw_class!r}; original verdict {result.get('verdict')}"
    res = session.execute(
        update(Run).where(Run.id == run_id, Run.status.in_(("queued", "running")))
        .values(status="done", verdict=verdict, reason_code=reason_code, reason=reason,
                compile=result.get("compile"), check=result.get("check"), bench=bench or None,
                median_us=_num(bench, "median_us"), baseline_median_us=_num(bench, "baseline_median_us"),
                speedup=_num(bench, "speedup"), speedup_ci_lo=_num(bench, "speedup_ci_lo"),
                speedup_ci_hi=_num(bench, "speedup_ci_hi"), frac_of_floor=_num(bench, "frac_of_floor"),
                control_run_id=bench.get("control_run_id"), control_median_us=_num(bench, "control_median_us"),
                vs_control=_num(bench, "vs_control"), vs_control_ci_lo=_num(bench, "vs_control_ci_lo"),
                vs_control_ci_hi=_num(bench, "vs_control_ci_hi"), ranked_us=ranked_us(session, bench),
                uses_library=result.get("uses_library"), wall_s=_num(result, "child_wall_s"),
                fingerprint_id=fingerprint_id,
                lease_expires_at=None, finished_at=now)
        .execution_options(synchronize_session=False))
    if res.rowcount != 1:
        session.rollback()
        return False
    run = session.scalars(select(Run).where(Run.id == run_id).execution_options(populate_existing=True)).one()
    update_winner(session, run, now=now)
    session.commit()
    return True


def stale_runs(session: Session, now: datetime | None = None, limit: int = 1000) -> list[Run]:
    """Queued or running runs whose lease expired: the broker lost them or their worker died.
    The sweeper re-enqueues them (then calls mark_enqueued); claim_run accepts expired leases."""
    now = now or utcnow()
    q = (select(Run).where(Run.status.in_(("queued", "running")), Run.lease_expires_at < now)
         .order_by(Run.lease_expires_at).limit(limit))
    return list(session.scalars(q))


def release_expired(session: Session, run_ids: list[str], now: datetime | None = None) -> int:
    """Running runs whose worker stopped renewing the lease go back to queued (before re-enqueueing),
    so job state reads right while they wait. Commits."""
    now = now or utcnow()
    res = session.execute(update(Run).where(Run.id.in_(run_ids), Run.status == "running", Run.lease_expires_at < now)
                          .values(status="queued", worker=None).execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount


def mark_enqueued(session: Session, run_ids: list[str], lease_seconds: float, now: datetime | None = None) -> int:
    """Give queued runs a fresh delivery lease after (re-)enqueueing them. Commits."""
    now = now or utcnow()
    res = session.execute(update(Run).where(Run.id.in_(run_ids), Run.status == "queued")
                          .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount


def mark_enqueue_failed(session: Session, run_ids: list[str]) -> None:
    """The broker refused: make the runs stale now so the next sweep enqueues them. Commits."""
    session.execute(update(Run).where(Run.id.in_(run_ids), Run.status == "queued")
                    .values(lease_expires_at=utcnow()).execution_options(synchronize_session=False))
    session.commit()
