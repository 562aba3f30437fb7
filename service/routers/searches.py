"""POST/GET /v1/searches, cancel: config searches over a variant's space, driven on the control queue.

A search has one sub-search per target: a deployment shape at one M (``per: "m"``) or over one batch
bucket (``per: "bucket"``, objective = the summed time over the bucket's Ms). The API only creates the
search and sends the drive task; progress is counted from the search's runs on every GET, so it is live
and survives restarts of the API and of the driver.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request

from db.models import Search
from db.queries import searches as q
from db.queries import variants as variants_q
from kernels.catalogue import get_slot
from kernels.deployment import batch_bucket
from kernels.specs import SpecError
from search.space import ConfigSpace, SpaceError
from service.auth import Principal, PrincipalDep, check_quota
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES, ApiError, invalid, not_found
from service.schemas import (SearchBest, SearchCancelOut, SearchCreate, SearchHistoryPoint, SearchOut,
                             SearchTargetOut)
from service.search_dispatch import DEFAULT_BATCH_SIZE, enqueue_drive, lease_seconds, queue_workers

log = logging.getLogger("kerneltune.searches")
router = APIRouter(prefix="/v1/searches", tags=["searches"], responses=ERROR_RESPONSES)


def _targets(space: ConfigSpace, shapes: list[Any], ms: list[int], per: str) -> list[dict[str, Any]]:
    groups: list[list[int]] = [[m] for m in ms] if per == "m" else []
    if per == "bucket":
        by_bucket: dict[str, list[int]] = {}
        for m in ms:
            by_bucket.setdefault(batch_bucket(m), []).append(m)
        groups = list(by_bucket.values())
    targets = []
    for shape in shapes:
        for group in groups:
            try:
                n = space.count(shape.as_build_arg(max(group)))
            except SpaceError as exc:
                raise invalid(f"config_space: {exc}") from None
            if n == 0:
                continue  # constraints exclude every config at this shape and M: nothing to search
            label = (f"{shape.name} M={group[0]}" if per == "m"
                     else f"{shape.name} bucket {batch_bucket(group[0])}")
            targets.append({"label": label, "shape": shape.to_json(), "shape_key": shape.key, "ms": group,
                            "valid_points": n})
    if not targets:
        raise invalid("no config of the variant's space is valid for any shape and batch size of this deployment")
    return targets


def _target_out(search: Search, target: dict[str, Any], proposals: list[q.ProposalRuns]) -> SearchTargetOut:
    finished = sorted((p for p in proposals if p.finished), key=lambda p: (p.finished_at or p.created_at, p.config_key))
    best: q.ProposalRuns | None = None
    history: list[SearchHistoryPoint] = []
    gpu_s = 0.0
    for i, p in enumerate(finished, start=1):
        gpu_s += p.cost_s
        value = p.median_us
        if p.fidelity == "full" and value is not None and (best is None or value < (best.median_us or 0.0)):
            best = p
        history.append(SearchHistoryPoint(evaluations=i, gpu_seconds=round(gpu_s, 6),
                                          best_us=best.median_us if best else None))
    best_out = None
    if best is not None and best.median_us is not None:
        base = best.baseline_us
        best_out = SearchBest(config=best.config, median_us=best.median_us, baseline_median_us=base,
                              speedup=base / best.median_us if base else None, run_ids=list(best.run_ids))
    reason = (search.stop_reasons or {}).get(target["label"])
    ms = list(target["ms"])
    return SearchTargetOut(
        label=target["label"], shape_name=target["shape"]["name"], shape_key=target["shape_key"], ms=ms,
        batch_bucket=batch_bucket(ms[0]) if search.per == "bucket" else None,
        valid_points=int(target.get("valid_points", 0)), evaluations=len(finished),
        full_evaluations=sum(1 for p in finished if p.fidelity == "full"),
        failed=sum(1 for p in finished if not p.passed), in_flight=len(proposals) - len(finished),
        gpu_seconds=round(gpu_s, 6), best=best_out, finished=reason is not None, stop_reason=reason, history=history)


def search_out(session: SessionDep, search: Search, enqueue_error: str | None = None) -> SearchOut:
    targets = [_target_out(search, t, q.target_runs(session, search.id, t["shape_key"], t["ms"]))
               for t in search.targets]
    return SearchOut(
        id=search.id, variant_id=search.variant_id, job_id=search.job_id, short_job_id=search.short_job_id,
        hardware=search.hardware, queue=search.queue, model_name=search.model_name, strategy=search.strategy,
        budget=search.budget, batch_size=search.batch_size, per=search.per, seed=search.seed,
        options=search.options or {}, state=search.state, error=search.error, driver=search.driver,  # type: ignore[arg-type]
        evaluations=sum(t.evaluations for t in targets), in_flight=sum(t.in_flight for t in targets),
        targets=targets, submitted_by=search.submitted_by, private=search.private, created_at=search.created_at,
        started_at=search.started_at, finished_at=search.finished_at, enqueue_error=enqueue_error)


def _visible(session: SessionDep, search_id: int, principal: Principal) -> Search:
    search = q.get_search(session, search_id)
    if search is None or not principal.can_see(search):  # type: ignore[arg-type]
        raise not_found("search", search_id)
    return search


def _send(request: Request, search_id: int) -> str | None:
    fn = getattr(request.app.state, "enqueue_search", None) or enqueue_drive
    try:
        fn(search_id)
    except Exception as exc:  # the search exists with a delivery lease: the sweeper sends it again
        log.warning("drive task for search %d not sent: %s", search_id, exc)
        return f"drive task not sent: {type(exc).__name__}: {exc}"
    return None


@router.post("", response_model=SearchOut, status_code=201)
def create_search(body: SearchCreate, request: Request, session: SessionDep, principal: PrincipalDep) -> SearchOut:
    variant = variants_q.get_variant(session, body.variant_id)
    if variant is None:
        raise not_found("variant", body.variant_id)
    dep = body.deployment
    try:
        shapes = get_slot(variant.slot).shapes(dep)
    except SpecError as exc:
        raise invalid(f"deployment: {exc}") from None
    if body.shapes is not None:
        unknown = [n for n in body.shapes if n not in {s.name for s in shapes}]
        if unknown or not body.shapes:
            raise invalid(f"shapes: unknown {unknown or 'empty list'}; this deployment gives {variant.slot} the "
                          f"shapes {', '.join(s.name for s in shapes)}")
        shapes = [s for s in shapes if s.name in body.shapes]
    space = ConfigSpace.parse({**variant.config_space, "constraints": variant.constraints})
    targets = _targets(space, shapes, dep.token_counts(), body.per)
    check_quota(session, principal)
    queue = f"kt.{body.hardware}"
    batch_size = body.batch_size or queue_workers(queue) or DEFAULT_BATCH_SIZE
    search = q.create_search(
        session, variant=variant, deployment=dep.model_dump(mode="json"), model_name=dep.model_name[:128],
        hardware=body.hardware, shape_filter=body.shapes, strategy=body.strategy, options=body.options,
        budget=body.budget.model_dump(), batch_size=batch_size, per=body.per, seed=body.seed, targets=targets,
        submitted_by=principal.name, token_id=principal.id, private=body.private,
        delivery_lease_seconds=lease_seconds())
    return search_out(session, search, _send(request, search.id))


@router.get("", response_model=list[SearchOut])
def list_searches(session: SessionDep, principal: PrincipalDep, variant_id: int | None = None,
                  state: str | None = None, limit: int = Query(50, ge=1, le=500),
                  offset: int = Query(0, ge=0)) -> list[SearchOut]:
    rows = q.list_searches(session, variant_id=variant_id, state=state, limit=limit, offset=offset,
                           visible_to=principal.id, all_visible=principal.is_admin)
    return [search_out(session, s) for s in rows]


@router.get("/{search_id}", response_model=SearchOut)
def get_search(search_id: int, session: SessionDep, principal: PrincipalDep) -> SearchOut:
    return search_out(session, _visible(session, search_id, principal))


@router.post("/{search_id}/cancel", response_model=SearchCancelOut)
def cancel_search(search_id: int, session: SessionDep, principal: PrincipalDep) -> SearchCancelOut:
    search = _visible(session, search_id, principal)
    if not principal.owns(search):  # type: ignore[arg-type]
        raise ApiError(403, "forbidden", f"search {search_id} was submitted by another token; only its owner or "
                                         "an admin token can cancel it")
    n = q.cancel_search(session, search_id)
    search = _visible(session, search_id, principal)
    return SearchCancelOut(search=search_out(session, search), cancelled_runs=n)
