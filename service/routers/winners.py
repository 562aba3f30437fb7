"""GET /v1/winners: the current winner per (slot, shape, batch bucket, hardware) with its evidence.
POST /v1/winners/bucket-checks: check each exported winner at the M of its bucket no run measured
(service/bucket_checks.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from db.models import Winner
from db.queries import jobs as jobs_q
from db.queries.winners import bucket_speedups, list_winners
from kernels.deployment import slower_than_stock, unchecked_in
from service.auth import PrincipalDep, check_quota
from service.bucket_checks import create_check_jobs, plan_bucket_checks
from service.deps import SessionDep, SettingsDep
from service.errors import ERROR_RESPONSES
from service.routers.jobs import enqueue_job_runs, job_out
from service.schemas import HARDWARE_PATTERN, FingerprintOut, HeadToHead, JobCreated, WinnerEvidence, WinnerOut

router = APIRouter(prefix="/v1/winners", tags=["winners"], responses=ERROR_RESPONSES)


def winner_out(w: Winner, speedups: dict[int, float | None]) -> WinnerOut:
    """``speedups``: per M of the bucket its (variant, config) passed at, the highest speedup CI there
    (db.queries.winners.bucket_speedups)."""
    checked = sorted(speedups)
    evidence = None
    run = w.run
    if run is not None and not w.is_stock:
        v = run.variant
        evidence = WinnerEvidence(
            run_id=run.id, job_id=run.job_id, variant_id=v.id, content_hash=v.content_hash, author=v.author,
            agent=v.agent, language=v.language, config=run.config, m=run.m, median_us=run.median_us,
            baseline_median_us=run.baseline_median_us, speedup=run.speedup, speedup_ci_lo=run.speedup_ci_lo,
            speedup_ci_hi=run.speedup_ci_hi, frac_of_floor=run.frac_of_floor, uses_library=run.uses_library,
            check=run.check, bench=run.bench, **HeadToHead.of(run),
            fingerprint=FingerprintOut.model_validate(run.fingerprint) if run.fingerprint else None,
            checked_ms=checked, unchecked_ms=unchecked_in(w.batch_bucket, checked),
            slower_ms=slower_than_stock(speedups.items()))
    return WinnerOut(slot=w.slot, shape_key=w.shape_key, shape_name=w.shape_name, batch_bucket=w.batch_bucket,
                     hardware=w.hardware, is_stock=w.is_stock, updated_at=w.updated_at, evidence=evidence)


@router.get("", response_model=list[WinnerOut])
def get_winners(session: SessionDep, slot: str | None = None, hardware: str | None = None) -> list[WinnerOut]:
    rows = list_winners(session, slot=slot, hardware=hardware)
    speedups = bucket_speedups(session, rows)
    return [winner_out(w, speedups.get(w.id, {})) for w in rows]


class BucketChecksCreate(BaseModel):
    hardware: str = Field(pattern=HARDWARE_PATTERN, description='hardware class of the winners: "h200", "cpu", ...')
    model: str = Field(min_length=1, max_length=128, description="the model whose export the checks cover")


class BucketChecksCreated(BaseModel):
    entries: int = Field(description="winners with M of their bucket that no done, queued or running run covers")
    runs: int
    jobs: list[JobCreated]


@router.post("/bucket-checks", response_model=BucketChecksCreated, status_code=201)
def create_bucket_checks(body: BucketChecksCreate, request: Request, session: SessionDep, settings: SettingsDep,
                         principal: PrincipalDep) -> BucketChecksCreated:
    """One job per variant (kind bucket_check, short-fidelity runs) on the hardware's queue; none when every exported
    winner's bucket is covered already."""
    per_variant, entries = plan_bucket_checks(session, hardware=body.hardware, model=body.model)
    if per_variant:
        check_quota(session, principal)
    created = []
    for job, run_ids in create_check_jobs(session, per_variant, hardware=body.hardware, submitted_by=principal.name,
                                          token_id=principal.id,
                                          queued_lease_seconds=settings.queued_lease_seconds):
        enqueued, error = enqueue_job_runs(request, session, run_ids, job.queue)
        progress = jobs_q.job_progress(session, [job.id])[job.id]
        created.append(JobCreated(job=job_out(job, progress), runs=len(run_ids), enqueued=enqueued,
                                  enqueue_error=error))
    return BucketChecksCreated(entries=entries, runs=sum(c.runs for c in created), jobs=created)
