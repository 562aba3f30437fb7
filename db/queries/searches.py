"""Search aggregate: creation, the driver's lease, the proposals (runs) a search made, derived progress.

A search stores no counters: its proposals are runs (``Run.search_id``, ``Run.fidelity``), grouped by
(target, fidelity, config); one proposal has one run per M of its target. Evaluations, the best so far
and the history are counted from them, so a restarted driver and the API read the same truth.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, or_, select, update
from sqlalchemy.orm import Session, load_only

from db.models import Job, Run, Search, Variant, utcnow
from db.queries.jobs import cancel_job
from kernels.deployment import batch_bucket

ACTIVE_STATES = ("queued", "running")
# What progress and resume read of a run: the driver polls these many times a second, so the large
# JSON columns (compile log, check trials, bench) stay in the database.
_PROPOSAL_COLUMNS = load_only(Run.id, Run.config, Run.config_key, Run.m, Run.fidelity, Run.status, Run.verdict,
                              Run.median_us, Run.baseline_median_us, Run.wall_s, Run.created_at, Run.finished_at)


def create_search(session: Session, *, variant: Variant, deployment: dict[str, Any], model_name: str,
                  hardware: str, shape_filter: list[str] | None, strategy: str, options: dict[str, Any],
                  budget: dict[str, Any], batch_size: int, per: str, seed: int, targets: list[dict[str, Any]],
                  submitted_by: str | None, token_id: int | None, private: bool,
                  delivery_lease_seconds: float) -> Search:
    """The search and the job(s) its runs belong to, in one transaction; commits. The search starts
    with no driver and a delivery lease: if the drive task is lost, the sweeper sends another."""
    now = utcnow()

    def job(kind: str) -> Job:
        j = Job(variant_id=variant.id, kind=kind, deployment=deployment, model_name=model_name, hardware=hardware,
                queue=f"kt.{hardware}", configs="search", shape_filter=shape_filter, submitted_by=submitted_by,
                token_id=token_id, private=private, cancelled=False, created_at=now)
        session.add(j)
        return j

    full = job("search")
    short = job("search-short") if strategy == "successive_halving" else None
    session.flush()
    search = Search(variant_id=variant.id, job_id=full.id, short_job_id=short.id if short else None,
                    hardware=hardware, queue=f"kt.{hardware}", deployment=deployment, model_name=model_name,
                    shape_filter=shape_filter, strategy=strategy, options=options, budget=budget,
                    batch_size=batch_size, per=per, seed=seed, targets=targets, state="queued", stop_reasons={},
                    driver=None, driver_lease_expires_at=now + timedelta(seconds=delivery_lease_seconds),
                    submitted_by=submitted_by, token_id=token_id, private=private, created_at=now)
    session.add(search)
    session.commit()
    return search


def get_search(session: Session, search_id: int) -> Search | None:
    return session.get(Search, search_id)


def list_searches(session: Session, *, variant_id: int | None = None, state: str | None = None,
                  limit: int = 100, offset: int = 0, visible_to: int | None = None,
                  all_visible: bool = True) -> list[Search]:
    q = select(Search).order_by(Search.id.desc()).limit(limit).offset(offset)
    if not all_visible:
        q = q.where(or_(Search.private.is_(False), Search.token_id == visible_to))
    if variant_id is not None:
        q = q.where(Search.variant_id == variant_id)
    if state is not None:
        q = q.where(Search.state == state)
    return list(session.scalars(q))


# -- the driver's lease ----------------------------------------------------------------------------
def claim_driver(session: Session, search_id: int, driver: str, lease_seconds: float,
                 now: datetime | None = None) -> Search | None:
    """Take the search for ``driver`` (commits): only when it is active and no live driver holds it.
    None: finished, cancelled, or driven elsewhere (a duplicate drive task)."""
    now = now or utcnow()
    res = session.execute(
        update(Search)
        .where(Search.id == search_id, Search.state.in_(ACTIVE_STATES),
               or_(Search.driver.is_(None), Search.driver_lease_expires_at < now))
        .values(driver=driver, driver_lease_expires_at=now + timedelta(seconds=lease_seconds), state="running")
        .execution_options(synchronize_session=False))
    if res.rowcount != 1:
        session.rollback()
        return None
    session.execute(update(Search).where(Search.id == search_id, Search.started_at.is_(None)).values(started_at=now)
                    .execution_options(synchronize_session=False))
    session.commit()
    return session.scalars(select(Search).where(Search.id == search_id)
                           .execution_options(populate_existing=True)).one()


def renew_driver(session: Session, search_id: int, driver: str, lease_seconds: float,
                 now: datetime | None = None) -> bool:
    """Heartbeat; False when the search is no longer this driver's (cancelled, taken over). Commits."""
    now = now or utcnow()
    res = session.execute(update(Search).where(Search.id == search_id, Search.driver == driver,
                                               Search.state == "running")
                          .values(driver_lease_expires_at=now + timedelta(seconds=lease_seconds))
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount == 1


def set_stop_reason(session: Session, search_id: int, driver: str, label: str, reason: str) -> None:
    """Record why one target stopped (commits); the search row is locked so targets finishing at once
    do not overwrite each other's entries."""
    search = session.scalars(select(Search).where(Search.id == search_id, Search.driver == driver)
                             .with_for_update().execution_options(populate_existing=True)).first()
    if search is not None:
        search.stop_reasons = {**(search.stop_reasons or {}), label: reason}
    session.commit()


def finish_search(session: Session, search_id: int, driver: str, state: str, error: str | None = None) -> bool:
    """Mark the search done or failed (commits); a no-op when this driver lost it."""
    now = utcnow()
    res = session.execute(update(Search).where(Search.id == search_id, Search.driver == driver,
                                               Search.state == "running")
                          .values(state=state, error=error, finished_at=now, driver_lease_expires_at=None)
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount == 1


def cancel_search(session: Session, search_id: int) -> int:
    """Stop the search and cancel its queued runs (running ones finish). Commits; returns how many runs
    were cancelled."""
    search = session.get(Search, search_id)
    if search is None:
        return 0
    session.execute(update(Search).where(Search.id == search_id, Search.state.in_(ACTIVE_STATES))
                    .values(state="cancelled", finished_at=utcnow(), driver_lease_expires_at=None)
                    .execution_options(synchronize_session=False))
    session.commit()
    n = sum(cancel_job(session, job_id) for job_id in (search.job_id, search.short_job_id) if job_id is not None)
    session.expire_all()
    return n


def stale_searches(session: Session, now: datetime | None = None, limit: int = 100) -> list[int]:
    """Active searches whose driver (or drive task delivery) lease ran out: their driver died."""
    now = now or utcnow()
    return list(session.scalars(select(Search.id).where(Search.state.in_(ACTIVE_STATES),
                                                        Search.driver_lease_expires_at < now)
                                .order_by(Search.id).limit(limit)))


def release_for_redelivery(session: Session, search_ids: Sequence[int], lease_seconds: float,
                           now: datetime | None = None) -> list[int]:
    """Drop the dead driver and give a fresh delivery lease before sending a new drive task; returns
    the ids released (those still stale: a driver may have renewed in the meantime). Commits."""
    now = now or utcnow()
    released = []
    for sid in search_ids:
        res = session.execute(update(Search).where(Search.id == sid, Search.state.in_(ACTIVE_STATES),
                                                   Search.driver_lease_expires_at < now)
                              .values(driver=None, driver_lease_expires_at=now + timedelta(seconds=lease_seconds))
                              .execution_options(synchronize_session=False))
        if res.rowcount == 1:
            released.append(sid)
    session.commit()
    return released


# -- proposals: the runs of a search ----------------------------------------------------------------
def add_proposal_runs(session: Session, search: Search, *, fidelity: str, proposals: Sequence[tuple[dict[str, Any], str]],
                      shape: dict[str, Any], shape_key: str, shape_name: str, ms: Sequence[int], slot: str,
                      queued_lease_seconds: float) -> list[list[str]]:
    """One queued run per (proposal, M) in one transaction; commits. Returns the run ids per proposal.
    (config, shape, M) is unique per job, so a proposal made twice fails here instead of re-running."""
    job_id = search.short_job_id if fidelity == "short" else search.job_id
    if job_id is None:
        raise ValueError(f"search {search.id} has no job for {fidelity!r} runs")
    now = utcnow()
    lease = now + timedelta(seconds=queued_lease_seconds)
    rows, ids = [], []
    for config, config_key in proposals:
        these = []
        for m in ms:
            run_id = str(uuid.uuid4())
            these.append(run_id)
            rows.append(dict(id=run_id, job_id=job_id, variant_id=search.variant_id, slot=slot, config=config,
                             config_key=config_key, shape=shape, shape_key=shape_key, shape_name=shape_name, m=m,
                             batch_bucket=batch_bucket(m), hardware=search.hardware, seed=secrets.randbelow(2**31),
                             status="queued", attempts=0, lease_expires_at=lease, created_at=now,
                             search_id=search.id, fidelity=fidelity))
        ids.append(these)
    if rows:
        session.execute(insert(Run), rows)
    session.commit()
    return ids


@dataclass
class ProposalRuns:
    """The runs of one proposal of one target: one per M."""

    fidelity: str
    config: dict[str, Any]
    config_key: str
    runs: list[Run] = field(default_factory=list)

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(sorted(r.id for r in self.runs))

    @property
    def finished(self) -> bool:
        return all(r.status in ("done", "cancelled") for r in self.runs)

    @property
    def finished_at(self) -> datetime | None:
        times = [r.finished_at for r in self.runs if r.finished_at is not None]
        return max(times) if times else None

    @property
    def created_at(self) -> datetime:
        return min(r.created_at for r in self.runs)

    @property
    def passed(self) -> bool:
        return all(r.status == "done" and r.verdict == "passed" and r.median_us is not None for r in self.runs)

    @property
    def median_us(self) -> float | None:
        """The objective: the summed median over the target's Ms (a bucket's step time)."""
        return sum(float(r.median_us) for r in self.runs) if self.passed else None  # type: ignore[arg-type]

    @property
    def baseline_us(self) -> float | None:
        values = [r.baseline_median_us for r in self.runs]
        return sum(values) if self.passed and all(v is not None for v in values) else None  # type: ignore[misc]

    @property
    def verdict(self) -> str:
        """passed, or the first failing run's verdict (a cancelled run reads 'cancelled')."""
        for r in sorted(self.runs, key=lambda r: r.m):
            if r.status == "cancelled":
                return "cancelled"
            if r.verdict != "passed" or r.median_us is None:
                return r.verdict or "error"
        return "passed"

    @property
    def cost_s(self) -> float:
        return sum(float(r.wall_s or 0.0) for r in self.runs)


def target_runs(session: Session, search_id: int, shape_key: str, ms: Sequence[int]) -> list[ProposalRuns]:
    """The proposals of one target, in the order they were made."""
    runs = session.scalars(select(Run).where(Run.search_id == search_id, Run.shape_key == shape_key,
                                             Run.m.in_(list(ms)))
                           .options(_PROPOSAL_COLUMNS).order_by(Run.created_at, Run.config_key, Run.m)).all()
    groups: dict[tuple[str, str], ProposalRuns] = {}
    for r in runs:
        key = (r.fidelity, r.config_key)
        if key not in groups:
            groups[key] = ProposalRuns(fidelity=r.fidelity, config=dict(r.config), config_key=r.config_key)
        groups[key].runs.append(r)
    return list(groups.values())


def runs_by_ids(session: Session, run_ids: Sequence[str]) -> list[Run]:
    if not run_ids:
        return []
    return list(session.scalars(select(Run).where(Run.id.in_(list(run_ids))).options(_PROPOSAL_COLUMNS)
                                .execution_options(populate_existing=True)))
