"""POST/GET /v1/jobs, cancel, a job's runs, and GET /v1/runs/{id}."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from sqlalchemy import Engine, Row
from sqlalchemy.exc import IntegrityError

from db.models import VERDICTS, Job
from db.queries import jobs as q
from db.queries import runs as runs_q
from db.queries import variants as variants_q
from kernels.catalogue import get_slot
from kernels.specs import SpecError
from kernels.slots.base import Shape
from search.space import ConfigSpace, SpaceError
from service.auth import Principal, PrincipalDep, check_quota
from service.deps import SessionDep, SettingsDep, resolve_enqueue, send_runs
from service.errors import ERROR_RESPONSES, ApiError, invalid, not_found
from service.schemas import CancelOut, JobCreate, JobCreated, JobOut, Progress, RunDetail, RunOut

log = logging.getLogger("kerneltune.service")
router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)


def job_out(job: Job | Row[Any], progress: q.Progress) -> JobOut:
    return JobOut(id=job.id, variant_id=job.variant_id, kind=job.kind, model_name=job.model_name,
                  hardware=job.hardware, queue=job.queue, deployment=job.deployment, configs=job.configs,
                  shapes=job.shape_filter, state=q.derive_state(job, progress),
                  progress=Progress.model_validate(progress), submitted_by=job.submitted_by,
                  private=job.private, created_at=job.created_at, cancelled_at=job.cancelled_at)


def _visible_job(session: SessionDep, job_id: int, principal: Principal) -> Job:
    """Another token's private job answers 404, as if it did not exist: its id leaks nothing."""
    job = q.get_job(session, job_id)
    if job is None or not principal.can_see(job):
        raise not_found("job", job_id)
    return job


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


IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$",
    description="retry-safe submission: a repeat with the same key (same token) returns the same job")]


def _replay(request: Request, response: Response, session: SessionDep, job: Job, body: JobCreate,
            deployment: dict[str, Any]) -> JobCreated:
    """A repeat of a submission that already exists whole: the same job, 200. Its never-started runs
    are enqueued again, since the first attempt may have died between commit and enqueue (a second
    message for a run is harmless: claim_run refuses it)."""
    if (job.variant_id, job.hardware, job.deployment, job.configs, job.shape_filter) != (
            body.variant_id, body.hardware, deployment, body.configs, body.shapes):
        raise ApiError(422, "idempotency_key_reused", "Idempotency-Key was already used for a different "
                                                      f"submission (job {job.id}); use a new key for a new job")
    pending = [r.id for r in runs_q.list_runs(session, job_id=job.id, status="queued", limit=100_000)
               if r.attempts == 0]
    enqueued, error = enqueue_job_runs(request, session, pending, job.queue) if pending else (True, None)
    progress = q.job_progress(session, [job.id])[job.id]
    response.status_code = 200
    return JobCreated(job=job_out(job, progress), runs=progress.total, enqueued=enqueued, enqueue_error=error)


@router.post("/v1/jobs", response_model=JobCreated, status_code=201,
             responses={200: {"model": JobCreated, "description": "a repeat of an earlier submission with the "
                                                                  "same Idempotency-Key: the same job"}})
def create_job(body: JobCreate, request: Request, response: Response, session: SessionDep, settings: SettingsDep,
               principal: PrincipalDep, idempotency_key: IdempotencyKey = None) -> JobCreated:
    key = f"{principal.id}:{idempotency_key}" if idempotency_key else None
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
    deployment = dep.model_dump(mode="json")
    if key is not None and (existing := q.get_job_by_idempotency_key(session, key)) is not None:
        return _replay(request, response, session, existing, body, deployment)
    check_quota(session, principal)
    try:
        job, run_ids = q.create_job(
            session, variant=variant, deployment=deployment, model_name=dep.model_name[:128],
            hardware=body.hardware, configs_requested=body.configs, shape_filter=body.shapes,
            submitted_by=principal.name, plan=plan, queued_lease_seconds=settings.queued_lease_seconds,
            token_id=principal.id, private=body.private, idempotency_key=key)
    except IntegrityError:
        # A concurrent submission with the same key won the race: this one's job and runs rolled
        # back together, so answer with the winner's.
        session.rollback()
        existing = q.get_job_by_idempotency_key(session, key) if key is not None else None
        if existing is None:
            raise
        return _replay(request, response, session, existing, body, deployment)
    enqueued, error = enqueue_job_runs(request, session, run_ids, job.queue)
    progress = q.job_progress(session, [job.id])[job.id]
    return JobCreated(job=job_out(job, progress), runs=len(run_ids), enqueued=enqueued, enqueue_error=error)


def enqueue_job_runs(request: Request, session: SessionDep, run_ids: list[str],
                     queue: str) -> tuple[bool, str | None]:
    """Runs are committed before this: a broker failure leaves them queued and stale for the sweeper."""
    error = send_runs(session, resolve_enqueue(request), run_ids, queue)
    if error is not None:
        log.warning("%s (%d runs left for the sweeper)", error, len(run_ids))
        return False, error
    return True, None


@router.get("/v1/jobs", response_model=list[JobOut])
def list_jobs(session: SessionDep, principal: PrincipalDep, variant_id: int | None = None,
              hardware: str | None = None, model: str | None = None, limit: int = Query(100, ge=1, le=1000),
              offset: int = Query(0, ge=0)) -> list[JobOut]:
    jobs = q.list_jobs(session, variant_id=variant_id, hardware=hardware, model_name=model, limit=limit, offset=offset,
                       visible_to=principal.id, all_visible=principal.is_admin)
    progress = q.job_progress(session, [j.id for j in jobs])
    return [job_out(j, progress[j.id]) for j in jobs]


def _get_job(engine: Engine, job_id: int, principal: Principal) -> JobOut:
    with engine.connect() as conn:
        found = q.job_with_progress(conn, job_id)
    if found is None or not principal.can_see(found[0]):  # type: ignore[arg-type]
        raise not_found("job", job_id)
    return job_out(*found)


@router.get("/v1/jobs/{job_id}", response_model=JobOut)
async def get_job(job_id: int, request: Request, principal: PrincipalDep) -> JobOut:
    # Status polling is the hottest read: one statement on a plain autocommit connection (no ORM
    # session, no BEGIN/ROLLBACK round trips), in one worker-thread hop.
    return await run_in_threadpool(_get_job, request.app.state.autocommit_engine, job_id, principal)


@router.post("/v1/jobs/{job_id}/cancel", response_model=CancelOut)
def cancel_job(job_id: int, session: SessionDep, principal: PrincipalDep) -> CancelOut:
    if not principal.owns(_visible_job(session, job_id, principal)):
        raise ApiError(403, "forbidden", f"job {job_id} was submitted by another token; only its owner or an "
                                         "admin token can cancel it")
    n = q.cancel_job(session, job_id)
    job = q.get_job(session, job_id)
    assert job is not None
    return CancelOut(job=job_out(job, q.job_progress(session, [job_id])[job_id]), cancelled_runs=n)


@router.get("/v1/jobs/{job_id}/runs", response_model=list[RunOut])
def list_job_runs(job_id: int, session: SessionDep, principal: PrincipalDep, verdict: str | None = None,
                  status: str | None = None,
                  limit: int = Query(5000, ge=1, le=100_000), offset: int = Query(0, ge=0)) -> list[RunOut]:
    if verdict is not None and verdict not in VERDICTS:
        raise invalid(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    _visible_job(session, job_id, principal)
    rows = runs_q.list_runs(session, job_id=job_id, verdict=verdict, status=status, limit=limit, offset=offset)
    return [RunOut.model_validate(r) for r in rows]


@router.get("/v1/runs/{run_id}", response_model=RunDetail)
def get_run(run_id: str, session: SessionDep, principal: PrincipalDep) -> RunDetail:
    run = runs_q.get_run(session, run_id)
    if run is None or not principal.can_see(run.job):
        raise not_found("run", run_id)
    return RunDetail.model_validate(run, from_attributes=True)
