"""GET /v1/leaderboard: passing runs per (slot, hardware, shape, M), fastest first (by ranked_us: a run timed beside
the incumbent is placed by that head-to-head, db/queries/runs.py)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from db.queries.leaderboard import leaderboard
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES
from service.schemas import HeadToHead, LeaderboardEntry, LeaderboardGroup

router = APIRouter(prefix="/v1/leaderboard", tags=["leaderboard"], responses=ERROR_RESPONSES)


@router.get("", response_model=list[LeaderboardGroup])
def get_leaderboard(session: SessionDep, slot: str | None = None, hardware: str | None = None,
                    model: str | None = Query(None, description="model spec name of the job's deployment"),
                    shape: str | None = Query(None, description="shape name (e.g. o_proj) or shape key"),
                    per_group: int = Query(20, ge=1, le=500)) -> list[LeaderboardGroup]:
    groups = leaderboard(session, slot=slot, hardware=hardware, model=model, shape=shape, per_group=per_group)
    return [
        LeaderboardGroup(
            slot=g.slot, hardware=g.hardware, shape_name=g.shape_name, shape_key=g.shape_key, m=g.m,
            batch_bucket=g.batch_bucket,
            entries=[LeaderboardEntry(
                rank=e.rank, run_id=e.run.id, job_id=e.run.job_id, variant_id=e.variant.id,
                content_hash=e.variant.content_hash, author=e.variant.author, agent=e.variant.agent,
                language=e.variant.language, config=e.run.config, median_us=e.run.median_us or 0.0,
                baseline_median_us=e.run.baseline_median_us, speedup=e.run.speedup,
                speedup_ci_lo=e.run.speedup_ci_lo, speedup_ci_hi=e.run.speedup_ci_hi,
                frac_of_floor=e.run.frac_of_floor, uses_library=e.run.uses_library,
                beats_stock=(e.run.speedup_ci_lo or 0.0) > 1.0, **HeadToHead.of(e.run)) for e in g.entries])
        for g in groups]
