"""Leaderboard: per (slot, hardware, shape, M) the passing runs ranked as winners are (ranked_us: the median,
carried into the incumbent's time base where the incumbent was timed beside the run)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from db.models import Job, Run, Variant


@dataclass
class Entry:
    rank: int
    run: Run
    variant: Variant


@dataclass
class Group:
    slot: str
    hardware: str
    shape_name: str
    shape_key: str
    m: int
    batch_bucket: str
    entries: list[Entry] = field(default_factory=list)


def leaderboard(session: Session, *, slot: str | None = None, hardware: str | None = None,
                model: str | None = None, shape: str | None = None, per_group: int = 20) -> list[Group]:
    """``shape`` matches a shape name or key. A (variant, config) appears once per group, with its best run."""
    q = (select(Run, Variant).join(Variant, Run.variant_id == Variant.id)
         .where(Run.status == "done", Run.verdict == "passed", Run.median_us.is_not(None))
         .order_by(Run.slot, Run.hardware, Run.shape_key, Run.m, Run.ranked_us, Run.finished_at))
    if slot is not None:
        q = q.where(Run.slot == slot)
    if hardware is not None:
        q = q.where(Run.hardware == hardware)
    if shape is not None:
        q = q.where(or_(Run.shape_name == shape, Run.shape_key == shape))
    if model is not None:
        q = q.join(Job, Run.job_id == Job.id).where(Job.model_name == model)
    groups: dict[tuple[str, str, str, int], Group] = {}
    seen: set[tuple[str, str, str, int, int, str]] = set()
    for run, variant in session.execute(q):
        gkey = (run.slot, run.hardware, run.shape_key, run.m)
        group = groups.get(gkey)
        if group is None:
            group = groups[gkey] = Group(run.slot, run.hardware, run.shape_name, run.shape_key, run.m,
                                         run.batch_bucket)
        ident = (*gkey, run.variant_id, run.config_key)
        if ident in seen or len(group.entries) >= per_group:
            continue
        seen.add(ident)
        group.entries.append(Entry(len(group.entries) + 1, run, variant))
    return list(groups.values())
