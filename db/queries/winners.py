"""Winner aggregate: one row per (slot, shape, bucket, hardware), kept up to date as results land.

The winner of a bucket is the best *candidate*: a done run that passed, timed at full fidelity, whose
speedup CI lies above 1 (beat stock beyond noise) and whose (variant, config) has no failing run for
the same shape and hardware at any M of the bucket; best = lowest ranked_us, then earliest finished,
then run id. With no candidate the stock kernel is the winner. ranked_us is the median where the run
was timed alone with stock, and the median in the time base of the incumbent it was timed beside where
a worker timed one (db/queries/runs.py ranked_us): a challenger displaces the incumbent it was timed
with exactly when it beat it beyond noise in the same rounds (a win inside the CI ranks level).

``recompute_winner`` evaluates that definition over the whole bucket. ``update_winner`` (what every
recorded result calls) gets the same answer from the current winner and the one new result, with
point lookups only, so recording a result costs the same at 10 runs in the bucket as at 10,000:

- results are write-once, so a new result can only add a candidate (a pass) or take candidates away
  (a failure disqualifies its (variant, config) in the bucket);
- while the current winner is still a candidate, it was the best of the old candidates and is still
  among them, so the new best is the better of the winner and the new run;
- when the winner itself lost its candidacy (its config just failed at another M), the bucket is
  recomputed in full.

Both paths test candidacy and rank in SQL with the same predicate and the same ORDER BY (the
incremental one over the two run ids only), so they cannot disagree on ties, NULLs or collation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, bindparam, case, func, literal, select, tuple_
from sqlalchemy.orm import Session, aliased, selectinload

from db.models import NON_FAILING_VERDICTS, Run, Winner, utcnow
from db.queries.common import insert_ignore
from kernels.deployment import BATCH_BUCKETS


def _bucket_order(bucket: str) -> int:
    return int(bucket.split("-")[0])


def failing_run(run: Any) -> Any:
    """``run`` (Run or an alias of it) is done with a verdict that blocks a winner. Spelled with literals
    (not bound parameters) so that PostgreSQL and SQLite can match it to the partial index
    ix_runs_failed_config (migration 0006) whatever plan they cache."""
    return (run.status == literal("done", literal_execute=True)) & run.verdict.not_in(
        bindparam("non_failing_verdicts", list(NON_FAILING_VERDICTS), expanding=True, literal_execute=True))


# Best first. Both paths sort with this, in SQL: ties, NULLs and string collation are the database's.
_ORDER = (Run.ranked_us, Run.finished_at, Run.id)


def _passing(key: dict[str, str]) -> Any:
    """A run of the bucket that passed with a full-fidelity timing beating stock beyond noise (the
    candidate test but for the failure check)."""
    return and_(*(getattr(Run, k) == v for k, v in key.items()),
                Run.status == "done", Run.verdict == "passed", Run.speedup_ci_lo > 1.0,
                Run.median_us.is_not(None), Run.ranked_us.is_not(None),
                Run.fidelity == "full")  # a short timing is no evidence


def _best_candidate(key: dict[str, str]) -> Select[tuple[Run]]:
    """Full recompute: the bucket's best candidate. The failed (variant, config) pairs of the bucket are
    one uncorrelated subquery (a hashed set, read once from the partial index), not a probe per
    candidate: the plan stays linear in the bucket even with statistics that count no done run (a
    correlated NOT EXISTS was planned as a nested loop over the bucket's failures per candidate)."""
    failing = aliased(Run)
    failed_configs = (select(failing.variant_id, failing.config_key)
                      .where(*(getattr(failing, k) == v for k, v in key.items()), failing_run(failing)))
    return (select(Run).where(_passing(key), tuple_(Run.variant_id, Run.config_key).not_in(failed_configs))
            .order_by(*_ORDER).limit(1))


def _ranked_candidates(key: dict[str, str], ids: list[str]) -> Select[tuple[Run, bool]]:
    """Incremental path: the runs ``ids`` by primary key, best first, each with whether it is a candidate.

    Shaped for a plan that cannot grow with the bucket, whatever the statistics say: the candidate test
    sits in the select list, not in WHERE, so the only access path is the primary key (with stale
    statistics a WHERE status = 'done' drew the planner to the status index, a scan of the bucket's done
    runs); the failure check is a scalar subquery (first failed run of this (variant, config) in the
    bucket, or NULL), which PostgreSQL runs per row as a point lookup into the partial index, where an
    EXISTS may be turned into a hashed set of all the bucket's failures. Same test as _best_candidate:
    (variant_id, config_key) are NOT NULL, so NOT IN, NOT EXISTS and IS NULL here agree."""
    failing = aliased(Run)
    first_failure = (select(failing.id)
                     .where(failing.variant_id == Run.variant_id, failing.config_key == Run.config_key,
                            *(getattr(failing, k) == v for k, v in key.items()), failing_run(failing))
                     .limit(1).scalar_subquery())
    is_candidate = case((and_(_passing(key), first_failure.is_(None)), True), else_=False)
    return select(Run, is_candidate).where(Run.id.in_(ids)).order_by(*_ORDER)


def _lock_winner(session: Session, key: dict[str, str], shape_name: str, now: datetime) -> tuple[Winner, bool]:
    """The bucket's winner row, created (stock) if missing, locked FOR UPDATE on PostgreSQL; and
    whether this call created it.

    The row lock orders the results of one bucket: two workers finishing runs of one bucket update the
    winner one after the other, the second seeing the first's committed result (its statements run
    after the lock is granted, on a fresh snapshot under READ COMMITTED). SQLite already serialises
    writers."""
    created = insert_ignore(session, Winner, dict(key, shape_name=shape_name, run_id=None, is_stock=True,
                                                  updated_at=now), list(key))
    winner = session.scalars(select(Winner).filter_by(**key).with_for_update()
                             .execution_options(populate_existing=True)).one()
    return winner, created


def _set(winner: Winner, best: Run | None, shape_name: str, now: datetime) -> None:
    winner.run_id = best.id if best else None
    winner.is_stock = best is None
    winner.shape_name = shape_name
    winner.updated_at = now


def recompute_winner(session: Session, *, slot: str, shape_key: str, shape_name: str, batch_bucket: str,
                     hardware: str, now: datetime | None = None) -> Winner:
    """Pick the winner for one bucket from all its runs (no commit). Costs a pass over the bucket's
    passing runs; ``update_winner`` is what a recorded result calls."""
    now = now or utcnow()
    key = dict(slot=slot, shape_key=shape_key, batch_bucket=batch_bucket, hardware=hardware)
    winner, _ = _lock_winner(session, key, shape_name, now)
    return _recompute(session, winner, key, shape_name, now)


def _recompute(session: Session, winner: Winner, key: dict[str, str], shape_name: str, now: datetime) -> Winner:
    _set(winner, session.scalars(_best_candidate(key)).first(), shape_name, now)
    session.flush()
    return winner


def update_winner(session: Session, run: Run, now: datetime | None = None) -> Winner:
    """The winner of ``run``'s bucket after ``run``'s result was written in this transaction (no commit).

    Same answer as ``recompute_winner``, from the current winner and ``run`` alone; falls back to the
    full recompute when the current winner stopped being a candidate (or the row is new)."""
    now = now or utcnow()
    key = dict(slot=run.slot, shape_key=run.shape_key, batch_bucket=run.batch_bucket, hardware=run.hardware)
    winner, created = _lock_winner(session, key, run.shape_name, now)
    # A stock row with a run id cannot come from here; a non-stock row without one lost its run (ON
    # DELETE SET NULL): neither says anything about the bucket's other runs, so recompute.
    if created or winner.is_stock != (winner.run_id is None):
        return _recompute(session, winner, key, run.shape_name, now)
    ids = [run.id] if winner.run_id is None else [run.id, winner.run_id]
    ranked = [r for r, is_candidate in session.execute(_ranked_candidates(key, ids)) if is_candidate]
    if winner.run_id is not None and winner.run_id not in {r.id for r in ranked}:
        return _recompute(session, winner, key, run.shape_name, now)  # the winner's config just failed
    _set(winner, ranked[0] if ranked else None, run.shape_name, now)
    session.flush()
    return winner


def incumbent_run(session: Session, run: Run) -> Run | None:
    """The run whose (variant, config) a worker should time beside ``run``: its bucket's current winner (always
    a full timing), when that is not stock and is another (variant, config) than ``run``'s."""
    winner_run_id = session.scalar(select(Winner.run_id).where(
        Winner.slot == run.slot, Winner.shape_key == run.shape_key, Winner.batch_bucket == run.batch_bucket,
        Winner.hardware == run.hardware, Winner.is_stock.is_(False)))
    if winner_run_id is None:
        return None
    incumbent = session.scalars(select(Run).where(Run.id == winner_run_id).options(selectinload(Run.variant))).first()
    if incumbent is None or (incumbent.variant_id, incumbent.config_key) == (run.variant_id, run.config_key):
        return None
    return incumbent


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


def bucket_speedups(session: Session, winners: list[Winner]) -> dict[int, dict[int, float | None]]:
    """Per tuned winner (by id): each M of its bucket at which a passed run of its (variant, config) checked it, the
    winning run's M and bucket checks included (service/bucket_checks.py), with the highest speedup CI of those runs
    there (None where none was timed). One query for the whole list."""
    ids = [w.id for w in winners if w.run_id is not None and not w.is_stock]
    if not ids:
        return {}
    won, other = aliased(Run), aliased(Run)
    same = and_(other.variant_id == won.variant_id, other.config_key == won.config_key, other.slot == won.slot,
                other.shape_key == won.shape_key, other.batch_bucket == won.batch_bucket,
                other.hardware == won.hardware)
    q = (select(Winner.id, other.m, func.max(other.speedup_ci_hi)).join(won, won.id == Winner.run_id).join(other, same)
         .where(Winner.id.in_(ids), other.status == "done", other.verdict == "passed").group_by(Winner.id, other.m))
    out: dict[int, dict[int, float | None]] = {i: {} for i in ids}
    for winner_id, m, hi in session.execute(q):
        out[winner_id][m] = hi
    return out


def checked_ms(session: Session, winners: list[Winner]) -> dict[int, list[int]]:
    """Per tuned winner (by id): the M of its bucket at which a passed run of its (variant, config) checked it."""
    return {i: sorted(by_m) for i, by_m in bucket_speedups(session, winners).items()}


assert all(lo <= hi for lo, hi in BATCH_BUCKETS)  # _bucket_order relies on 'lo' or 'lo-hi' names
