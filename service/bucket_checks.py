"""Check each winner at the batch sizes of its bucket that no run measured, through the pipeline.

The exported package runs a bucket's winner at every M of the bucket (the M = 8 winner at M = 5-7 as well), while
its runs checked it at the M a plan asked for. A bucket check is one short-fidelity run per missing M of the winner's
(variant, config, shape): the worker compiles it, checks it on fresh inputs like any run and times it briefly. Short
runs never rank (db/queries/winners.py), so a bucket check cannot move a winner by being fast; a failing one
disqualifies its (variant, config) in the bucket like any failure, and the bucket falls to the next candidate or to
stock. Passed ones become the entry's evidence at those M (export/collect.py), so the export's ``unchecked`` shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Run, Variant
from db.queries.jobs import PlannedRun
from export.collect import collect
from export.coverage import unchecked_ms
from kernels.slots.base import Shape


@dataclass
class VariantChecks:
    """The bucket checks of one variant: one job."""
    variant: Variant
    model_name: str
    deployment: dict
    plan: list[PlannedRun]


def plan_bucket_checks(session: Session, *, hardware: str, model: str) -> tuple[list[VariantChecks], int]:
    """Per variant, the (config, shape, M) runs that would check each exported winner of (hardware, model) at the M
    of its bucket with no done run of its (variant, config) and none queued or running; and how many entries need
    any. Winners the export would refuse are left out (their bucket is not shipped)."""
    by_variant: dict[int, VariantChecks] = {}
    entries = 0
    for entry in collect(session, hardware=hardware, model=model).entries:
        missing = unchecked_ms(entry)
        if not missing:
            continue
        run = session.get(Run, entry.winner.run_id)
        assert run is not None  # collect read it a moment ago in this session
        pending = set(session.scalars(select(Run.m).where(
            Run.variant_id == run.variant_id, Run.config_key == run.config_key, Run.shape_key == run.shape_key,
            Run.hardware == run.hardware, Run.m.in_(missing), Run.status.in_(("queued", "running")))))
        todo = [m for m in missing if m not in pending]
        if not todo:
            continue
        entries += 1
        checks = by_variant.setdefault(run.variant_id, VariantChecks(
            variant=run.variant, model_name=run.job.model_name, deployment=dict(run.job.deployment), plan=[]))
        shape = Shape.from_json(run.shape)
        checks.plan += [PlannedRun(dict(run.config), run.config_key, shape, m) for m in todo]
    return [by_variant[v] for v in sorted(by_variant)], entries


def configs_of(plan: list[PlannedRun]) -> list[dict]:
    """The distinct configs of a plan, in first-seen order (what the job records as requested)."""
    seen: dict[str, dict] = {}
    for p in plan:
        seen.setdefault(p.config_key, p.config)
    return list(seen.values())
