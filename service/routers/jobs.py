"""POST/GET /v1/jobs, cancel, a job's runs, and GET /v1/runs/{id}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request

from db.models import VERDICTS, Job
from db.queries import jobs as q
from db.queries import runs as runs_q
from db.queries import variants as variants_q
from kernels.catalogue import get_slot
from kernels.specs import SpecError
from kernels.slots.base import Shape
from search.space import ConfigSpace, SpaceError
from service.deps import SessionDep, SettingsDep, resolve_enqueue
from service.errors import ERROR_RESPONSES, invalid, not_found
from service.schemas import CancelOut, JobCreate, JobCreated, JobOut, Progress, RunDetail, RunOut

log = logging.getLogger("kerneltune.service")
router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)


def job_out(job: Job, progress: q.Progress) -> JobOut:
    return JobOut(id=job.id, variant_id=job.variant_id, kind=job.kind, model_name=job.model_name,
                  hardware=job.hardware, queue=job.queue, deployment=job.deployment, configs=job.configs,
                  shapes=job.shape_filter, state=q.derive_state(job, progress),
                  progress=Progress.model_validate(progress), submitted_by=job.submitted_by,
                  created_at=job.created_at, cancelled_at=job.cancelled_at)


def _plan(space: ConfigSpace, configs: Any, shapes: list[Shape], ms: list[int], limit: int) -> list[q.PlannedRun]:
    """One run per (config, shape, M) where the config is valid for that shape and M (constraints may
    read N, K, M...). Stops as soon as the plan exceeds ``limit`` runs."""
    explicit: list[tuple[dict[str, Any], str]] = []
    if configs != "all":
        if not configs:
            raise invalid('configs: give "all" or a non-empty list of configs')
        seen: set[str] = set()
        for c in configs:  # a config listed twice is one config
            if set(c) != set(space.params):
                raise invalid(f"configs: {c} must set exactly the params {sorted(space.params)}")
            key = ConfigSpace.canonical(c)
            if key not in seen:
                seen.add(key)
                explicit.append((c, key))
    plan: list[q.PlannedRun] = []
    try:
        for shape in shapes:
            for m in ms:
                arg = shape.as_build_arg(m)
                if configs == "all":
                    chosen = ((p, ConfigSpace.canonical(p)) for p in space.points(arg))
                else:
                    chosen = ((c, k) for c, k in explicit if space.is_valid(c, arg))
                for config, key in chosen:
                    plan.append(q.PlannedRun(config, key, shape, m))
                    if len(plan) > limit:
                        raise invalid(f"job would create more than {limit} runs (configs x {len(shapes)} shapes x "
                                      f"{len(ms)} batch sizes); pass fewer configs, shapes or batch sizes")
    except SpaceError as exc:
        raise invalid(f"configs: {exc}") from None
    if not plan:
        raise invalid("configs: no config is valid for any shape and batch size of this deployment "
                      "(values outside the space, or constraints exclude them)")
    return plan


@router.post("/v1/jobs", response_model=JobCreated, status_code=201)
def create_job(body: JobCreate, request: Request, session: SessionDep, settings: SettingsDep) -> JobCreated:
    variant = variants_q.get_variant(session, body.variant_id)
    if variant is None:
        raise not_found("variant", body.variant_id)
    dep = body.deployment
    try:
        shapes = get_slot(variant.slot).shapes(dep)
    except SpecError as exc:
        raise invalid(f"deployment: {exc}") from None
    if body.shapes is not None:
        valid = [s.name for s in shapes]
        unknown = [n for n in body.shapes if n not in valid]
        if unknown or not body.shapes:
            raise invalid(f"shapes: unknown {unknown or 'empty list'}; this deployment gives {variant.slot} "
                          f"the shapes {', '.join(valid)}")
        shapes = [s for s in shapes if s.name in body.shapes]
    ms = dep.token_counts()
    space = ConfigSpace.parse({**variant.config_space, "constraints": variant.constraints})
    plan = _plan(space, body.configs, shapes, ms, settings.max_runs_per_job)
    job, run_ids = q.create_job(
        session, variant=variant, deployment=dep.model_dump(mode="json"), model_name=dep.model_name[:128],
        hardware=body.hardware, configs_requested=body.configs, shape_filter=body.shapes,
        submitted_by=body.submitted_by, plan=plan, queued_lease_seconds=settings.queued_lease_seconds)
    enqueued, error = _enqueue(request, session, run_ids, job.queue)
    progress = q.job_progress(session, [job.id])[job.id]
    return JobCreated(job=job_out(job, progress), runs=len(run_ids), enqueued=enqueued, enqueue_error=error)


def _enqueue(request: Request, session: SessionDep, run_ids: list[str], queue: str) -> tuple[bool, str | None]:
    """Runs are committed before this: a broker failure leaves them queued and stale for the sweeper."""
    fn = resolve_enqueue(request)
    error: str | None = None
    if isinstance(fn, str):
        error = fn
    else:
        try:
            fn(run_ids, queue)
        except Exception as exc:  # any broker failure: the job exists, the sweeper retries
            error = f"enqueue to {queue} failed: {type(exc).__name__}: {exc}"
    if error is not None:
        log.warning("%s (%d runs left for the sweeper)", error, len(run_ids))
        runs_q.mark_enqueue_failed(session, run_ids)
        return False, error
    return True, None


@router.get("/v1/jobs", response_model=list[JobOut])
def list_jobs(session: SessionDep, variant_id: int | None = None, hardware: str | None = None,
              model: str | None = None, limit: int = Query(100, ge=1, le=1000),
              offset: int = Query(0, ge=0)) -> list[JobOut]:
    jobs = q.list_jobs(session, variant_id=variant_id, hardware=hardware, model_name=model, limit=limit, offset=offset)
    progress = q.job_progress(session, [j.id for j in jobs])
    return [job_out(j, progress[j.id]) for j in jobs]


@router.get("/v1/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: int, session: SessionDep) -> JobOut:
    job = q.get_job(session, job_id)
    if job is None:
        raise not_found("job", job_id)
    return job_out(job, q.job_progress(session, [job_id])[job_id])


@router.post("/v1/jobs/{job_id}/cancel", response_model=CancelOut)
def cancel_job(job_id: int, session: SessionDep) -> CancelOut:
    if q.get_job(session, job_id) is None:
        raise not_found("job", job_id)
    n = q.cancel_job(session, job_id)
    job = q.get_job(session, job_id)
    assert job is not None
    return CancelOut(job=job_out(job, q.job_progress(session, [job_id])[job_id]), cancelled_runs=n)


@router.get("/v1/jobs/{job_id}/runs", response_model=list[RunOut])
def list_job_runs(job_id: int, session: SessionDep, verdict: str | None = None, status: str | None = None,
                  limit: int = Query(5000, ge=1, le=100_000), offset: int = Query(0, ge=0)) -> list[RunOut]:
    if verdict is not None and verdict not in VERDICTS:
        raise invalid(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    if q.get_job(session, job_id) is None:
        raise not_found("job", job_id)
    rows = runs_q.list_runs(session, job_id=job_id, verdict=verdict, status=status, limit=limit, offset=offset)
    return [RunOut.model_validate(r) for r in rows]


@router.get("/v1/runs/{run_id}", response_model=RunDetail)
def get_run(run_id: str, session: SessionDep) -> RunDetail:
    run = runs_q.get_run(session, run_id)
    if run is None:
        raise not_found("run", run_id)
    return RunDetail.model_validate(run, from_attributes=True)
