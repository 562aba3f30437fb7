"""Check each winner at the batch sizes of its bucket that no run measured, through the pipeline.

The exported package runs a bucket's winner at every M of the bucket (the M = 8 winner at M = 5-7 as well), while
its runs checked it at the M a plan asked for. A bucket check is one short-fidelity run per missing M of the winner's
(variant, config, shape): the worker compiles it, checks it on fresh inputs like any run and times it briefly. Short
runs never rank (db/queries/winners.py), so a bucket check cannot move a winner by being fast; a failing one
disqualifies its (variant, config) in the bucket like any failure, and the bucket falls to the next candidate or to
stock. Passed ones become the entry's evidence at those M (export/collect.py), so the export's ``unchecked`` shrinks.

Asked for through POST /v1/winners/bucket-checks, or by the API itself with ``KT_AUTO_BUCKET_CHECKS=1``
(``auto_checks_forever``): every interval it plans the checks of every model's winners on every hardware, so that a
new winner is checked at its whole bucket without anyone asking (DESIGN.md: a winner has passed every check at every
batch size of its bucket). The plan skips M already queued or running, so a round adds only what is new, and M whose
check was cancelled (a cancelled job stays cancelled; the POST plans it again).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from db.models import Job, Run, Variant, Winner
from db.queries.jobs import PlannedRun, create_job
from export.collect import collect
from export.coverage import unchecked_ms
from kernels.slots.base import Shape
from service.deps import EnqueueFn, send_runs

log = logging.getLogger("kerneltune.bucket_checks")
# Who the automatic checks' jobs say submitted them (no token: the API's own work, outside any quota).
AUTO_SUBMITTER = "kerneltune:auto-bucket-checks"


@dataclass
class VariantChecks:
    """The bucket checks of one variant: one job."""
    variant: Variant
    model_name: str
    deployment: dict
    plan: list[PlannedRun]


def plan_bucket_checks(session: Session, *, hardware: str, model: str,
                       skip_cancelled: bool = False) -> tuple[list[VariantChecks], int]:
    """Per variant, the (config, shape, M) runs that would check each exported winner of (hardware, model) at the M
    of its bucket with no done run of its (variant, config) and none queued or running (nor, with
    ``skip_cancelled``, a cancelled one: someone stopped it, and only an explicit request plans it again); and how
    many entries need any. Winners the export would refuse are left out (their bucket is not shipped)."""
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
            Run.hardware == run.hardware, Run.m.in_(missing),
            Run.status.in_(("queued", "running", "cancelled") if skip_cancelled else ("queued", "running")))))
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


def create_check_jobs(session: Session, plan: list[VariantChecks], *, hardware: str, submitted_by: str,
                      token_id: int | None, queued_lease_seconds: int) -> list[tuple[Job, list[str]]]:
    """One committed job per variant (kind bucket_check, short-fidelity runs), not yet enqueued: the caller
    enqueues each job's run ids on ``job.queue``."""
    return [create_job(session, variant=c.variant, deployment=c.deployment, model_name=c.model_name,
                       hardware=hardware, configs_requested=configs_of(c.plan), shape_filter=None,
                       submitted_by=submitted_by, plan=c.plan, queued_lease_seconds=queued_lease_seconds,
                       token_id=token_id, kind="bucket_check", fidelity="short")
            for c in plan]


def check_targets(session: Session) -> list[tuple[str, str]]:
    """(hardware, model) of every tuned winner: the model of the job its winning run came from."""
    q = (select(Winner.hardware, Job.model_name).join(Run, Run.id == Winner.run_id).join(Job, Job.id == Run.job_id)
         .where(Winner.is_stock.is_(False)).distinct().order_by(Winner.hardware, Job.model_name))
    return [(hw, model) for hw, model in session.execute(q)]


def auto_check_once(factory: sessionmaker[Session], enqueue: EnqueueFn, queued_lease_seconds: int) -> int:
    """Plan, create and enqueue the bucket checks of every (hardware, model); returns the runs created. A broker
    failure leaves them queued with a failed delivery, for the sweeper (as for any job)."""
    created = 0
    with factory() as session:
        for hardware, model in check_targets(session):
            plan, _ = plan_bucket_checks(session, hardware=hardware, model=model, skip_cancelled=True)
            for job, run_ids in create_check_jobs(session, plan, hardware=hardware, submitted_by=AUTO_SUBMITTER,
                                                  token_id=None, queued_lease_seconds=queued_lease_seconds):
                created += len(run_ids)
                error = send_runs(session, enqueue, run_ids, job.queue)
                if error is not None:
                    log.warning("bucket checks of job %d: %s; left for the sweeper", job.id, error)
                else:
                    log.info("bucket checks: job %d, %d runs on %s (%s, %s)", job.id, len(run_ids), job.queue,
                             hardware, model)
    return created


async def auto_checks_forever(factory: sessionmaker[Session], enqueue: EnqueueFn, interval_s: float,
                              queued_lease_seconds: int) -> None:
    # A random first wait: API processes started together (serve --workers N) do not plan the same checks at once.
    await asyncio.sleep(random.uniform(0, interval_s))
    while True:
        try:
            await asyncio.to_thread(auto_check_once, factory, enqueue, queued_lease_seconds)
        except Exception:  # a DB outage: try again next round, never kill the API
            log.exception("automatic bucket checks failed; retrying in %.0f s", interval_s)
        await asyncio.sleep(interval_s)
