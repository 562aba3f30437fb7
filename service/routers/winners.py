"""GET /v1/winners: the current winner per (slot, shape, batch bucket, hardware) with its evidence."""

from __future__ import annotations

from fastapi import APIRouter

from db.models import Winner
from db.queries.winners import list_winners
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES
from service.schemas import FingerprintOut, HeadToHead, WinnerEvidence, WinnerOut

router = APIRouter(prefix="/v1/winners", tags=["winners"], responses=ERROR_RESPONSES)


def winner_out(w: Winner) -> WinnerOut:
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
            fingerprint=FingerprintOut.model_validate(run.fingerprint) if run.fingerprint else None)
    return WinnerOut(slot=w.slot, shape_key=w.shape_key, shape_name=w.shape_name, batch_bucket=w.batch_bucket,
                     hardware=w.hardware, is_stock=w.is_stock, updated_at=w.updated_at, evidence=evidence)


@router.get("", response_model=list[WinnerOut])
def get_winners(session: SessionDep, slot: str | None = None, hardware: str | None = None) -> list[WinnerOut]:
    return [winner_out(w) for w in list_winners(session, slot=slot, hardware=hardware)]
