"""Job aggregate: creation with its whole fan-out of runs, derived state and progress, cancel."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Row, func, insert, or_, select, update
from sqlalchemy.orm import Session

from db.models import Job, Run, Variant, utcnow
from kernels.deployment import batch_bucket
from kernels.slots.base import Shape


@dataclass
class Progress:
    total: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    cancelled: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)


def derive_state(job: Job, progress: Progress) -> str:
    """queued | running | done | cancelled, from the runs (only the cancel flag is stored)."""
    if job.cancelled:
        return "cancelled"
    if progress.total and progress.done + progress.cancelled == progress.total:
        return "done"
    if progress.running or progress.done:
        return "running"
    return "queued"


@dataclass(frozen=True)
class PlannedRun:
    config: dict[str, Any]
    config_key: str  # canonical JSON of config
    shape: Shape
    m: int


def create_job(session: Session, *, variant: Variant, deployment: dict[str, Any], model_name: str,
               hardware: str, configs_requested: Any, shape_filter: list[str] | None,
               submitted_by: str | None, plan: list[PlannedRun],
               queued_lease_seconds: int, token_id: int | None = None,
               private: bool = False, idempotency_key: str | None = None, kind: str = "eval",
               fidelity: str = "full") -> tuple[Job, list[str]]:
    """The job and one queued run per planned (config, shape, M), in one transaction; commits.

    Each run gets a fresh random base seed. The queued lease is how long the sweeper trusts the
    broker to deliver before it re-enqueues (see runs.stale_runs). ``kind`` "bucket_check" with ``fidelity``
    "short": a winner checked at the other M of its bucket (service/bucket_checks.py), timed briefly, never ranked."""
    now = utcnow()
    job = Job(variant_id=variant.id, kind=kind, deployment=deployment, model_name=model_name,
              hardware=hardware, queue=f"kt.{hardware}", configs=configs_requested,
              shape_filter=shape_filter, submitted_by=submitted_by, token_id=token_id, private=private,
              idempotency_key=idempotency_key, cancelled=False, created_at=now)
    session.add(job)
    session.flush()
    lease = now + timedelta(seconds=queued_lease_seconds)
    rows = [dict(id=str(uuid.uuid4()), job_id=job.id, variant_id=variant.id, slot=variant.slot, config=p.config,
                 config_key=p.config_key, shape=p.shape.to_json(), shape_key=p.shape.key, shape_name=p.shape.name,
                 m=p.m, batch_bucket=batch_bucket(p.m), hardware=hardware, seed=secrets.randbelow(2**31),
                 status="queued", attempts=0, lease_expires_at=lease, created_at=now, fidelity=fidelity)
            for p in plan]
    if rows:
        session.execute(insert(Run), rows)
    session.commit()
    return job, [r["id"] for r in rows]


def get_job(session: Session, job_id: int) -> Job | None:
    return session.get(Job, job_id)


def get_job_by_idempotency_key(session: Session, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.idempotency_key == key))


def list_jobs(session: Session, *, variant_id: int | None = None, hardware: str | None = None,
              model_name: str | None = None, limit: int = 100, offset: int = 0,
              visible_to: int | None = None, all_visible: bool = True) -> list[Job]:
    """``all_visible=False``: only public jobs and the private jobs of token ``visible_to``."""
    q = select(Job).order_by(Job.id.desc()).limit(limit).offset(offset)
    if not all_visible:
        q = q.where(or_(Job.private.is_(False), Job.token_id == visible_to))
    if variant_id is not None:
        q = q.where(Job.variant_id == variant_id)
    if hardware is not None:
        q = q.where(Job.hardware == hardware)
    if model_name is not None:
        q = q.where(Job.model_name == model_name)
    return list(session.scalars(q))


def job_progress(session: Session, job_ids: list[int]) -> dict[int, Progress]:
    """Counts per job from one grouped query over the runs."""
    out = {jid: Progress() for jid in job_ids}
    if not job_ids:
        return out
    q = (select(Run.job_id, Run.status, Run.verdict, func.count())
         .where(Run.job_id.in_(job_ids)).group_by(Run.job_id, Run.status, Run.verdict))
    for job_id, status, verdict, n in session.execute(q):
        _count(out[job_id], status, verdict, n)
    return out


def _count(p: Progress, status: str, verdict: str | None, n: int) -> None:
    p.total += n
    setattr(p, status, getattr(p, status) + n)
    if status == "done" and verdict:
        p.by_verdict[verdict] = p.by_verdict.get(verdict, 0) + n


_JOBS, _RUNS = Job.__table__, Run.__table__
# The job's row and its runs' counts by (status, verdict) in one statement: a job without runs
# gives one row with a NULL status. GROUP BY the primary key lets the job's columns through.
_JOB_WITH_PROGRESS = (
    select(_JOBS, _RUNS.c.status.label("run_status"), _RUNS.c.verdict.label("run_verdict"),
           func.count(_RUNS.c.id).label("run_count"))
    .select_from(_JOBS.outerjoin(_RUNS, _RUNS.c.job_id == _JOBS.c.id))
    .group_by(_JOBS.c.id, _RUNS.c.status, _RUNS.c.verdict))


def job_with_progress(conn: Connection, job_id: int) -> tuple[Row[Any], Progress] | None:
    """The job's row (attributes named as Job's) and its progress, in one round trip on a plain
    Connection (no ORM session: the status-polling path). None if there is no such job."""
    rows = conn.execute(_JOB_WITH_PROGRESS.where(_JOBS.c.id == job_id)).all()
    if not rows:
        return None
    progress = Progress()
    for row in rows:
        if row.run_status is not None:
            _count(progress, row.run_status, row.run_verdict, row.run_count)
    return rows[0], progress


def cancel_job(session: Session, job_id: int) -> int:
    """Flag the job and cancel its queued runs (workers skip them); running runs finish. Commits.
    Returns how many runs were cancelled."""
    now = utcnow()
    res = session.execute(update(Run).where(Run.job_id == job_id, Run.status == "queued")
                          .values(status="cancelled", lease_expires_at=None, finished_at=now))
    session.execute(update(Job).where(Job.id == job_id, Job.cancelled.is_(False))
                    .values(cancelled=True, cancelled_at=now))
    session.commit()
    session.expire_all()  # a Job already loaded in this session must show the flag
    return res.rowcount
