"""Winner aggregate: recomputed after every recorded result, one row per (slot, shape, bucket, hardware)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased, selectinload

from db.models import NON_FAILING_VERDICTS, Run, Winner, utcnow
from db.queries.common import insert_ignore
from kernels.deployment import BATCH_BUCKETS


def _bucket_order(bucket: str) -> int:
    return int(bucket.split("-")[0])


def recompute_winner(session: Session, *, slot: str, shape_key: str, shape_name: str, batch_bucket: str,
                     hardware: str, now: datetime | None = None) -> Winner:
    """Pick the winner for one bucket (no commit).

    Candidates: done runs that passed and whose speedup CI lies above 1 (beat stock beyond noise).
    A candidate's (variant, config) must have no failing run for the same shape and hardware at any
    M of the bucket. Lowest median wins; with no candidate the stock kernel is the winner."""
    now = now or utcnow()
    key = dict(slot=slot, shape_key=shape_key, batch_bucket=batch_bucket, hardware=hardware)
    insert_ignore(session, Winner, dict(key, shape_name=shape_name, run_id=None, is_stock=True, updated_at=now),
                  list(key))
    # Row lock (PostgreSQL): two workers finishing runs of one bucket recompute one after the other,
    # the second seeing the first's result. SQLite already serialises writers.
    winner = session.scalars(select(Winner).filter_by(**key).with_for_update()
                             .execution_options(populate_existing=True)).one()
    failing = aliased(Run)
    fails = (select(failing.id)
             .where(failing.variant_id == Run.variant_id, failing.config_key == Run.config_key,
                    failing.slot == Run.slot, failing.shape_key == Run.shape_key,
                    failing.batch_bucket == Run.batch_bucket, failing.hardware == Run.hardware,
                    failing.status == "done", failing.verdict.not_in(NON_FAILING_VERDICTS))
             .exists())
    best = session.scalars(
        select(Run).filter_by(**key)
        .where(Run.status == "done", Run.verdict == "passed", Run.speedup_ci_lo > 1.0,
               Run.median_us.is_not(None), Run.fidelity == "full", ~fails)  # a short timing is no evidence
        .order_by(Run.median_us, Run.finished_at, Run.id).limit(1)).first()
    winner.run_id = best.id if best else None
    winner.is_stock = best is None
    winner.shape_name = shape_name
    winner.updated_at = now
    session.flush()
    return winner


def list_winners(session: Session, *, slot: str | None = None, hardware: str | None = None) -> list[Winner]:
    """Winners with their evidence (run, variant, fingerprint) loaded, in catalogue order."""
    q = select(Winner).options(selectinload(Winner.run).selectinload(Run.variant),
                               selectinload(Winner.run).selectinload(Run.fingerprint))
    if slot is not None:
        q = q.where(Winner.slot == slot)
    if hardware is not None:
        q = q.where(Winner.hardware == hardware)
    rows = list(session.scalars(q))
    rows.sort(key=lambda w: (w.slot, w.hardware, w.shape_key, _bucket_order(w.batch_bucket)))
    return rows


assert all(lo <= hi for lo, hi in BATCH_BUCKETS)  # _bucket_order relies on 'lo' or 'lo-hi' names
