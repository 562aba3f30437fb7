"""POST/GET /v1/variants."""

from __future__ import annotations

import ast

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from db.queries import variants as q
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from kernels.variant_meta import declared_literals
from search.space import ConfigSpace, SpaceError
from service.deps import SessionDep, SettingsDep
from service.errors import ERROR_RESPONSES, ApiError, invalid, not_found
from service.schemas import VariantCreate, VariantCreated, VariantDetail, VariantSummary

router = APIRouter(prefix="/v1/variants", tags=["variants"], responses=ERROR_RESPONSES)


def _check_source(source: str, limit: int) -> None:
    size = len(source.encode())
    if size > limit:
        raise ApiError(413, "source_too_large", f"source is {size} bytes; the limit is {limit} bytes")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise invalid(f"source does not parse as Python: line {exc.lineno}: {exc.msg}") from None
    defines_build = any(
        (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "build")
        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "build" for t in n.targets))
        or (isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "build" for a in n.names))
        for n in tree.body)
    if not defines_build:
        raise invalid("source must define build(config, shape) at module level")


def _check_space(slot: str, raw: dict[str, object], limit: int) -> tuple[ConfigSpace, int]:
    """Parse with search.space (the one space language); constraint names must be params or the slot's
    shape names (dims, M). Returns the space and its point count (raw when constraints read shapes)."""
    try:
        space = ConfigSpace.parse(raw, max_size=limit)
        shape_names: dict[str, object] = {}
        for shape in get_slot(slot).shapes(Deployment()):
            shape_names.update(shape.as_build_arg(1))
        space.check_names(shape_names)
        if any(c.names - set(space.params) for c in space.constraints):
            return space, space.size()  # depends on the shape: counted per (shape, M) when a job fans out
        n_points = space.count({})
    except SpaceError as exc:
        raise invalid(f"config_space: {exc}") from None
    if n_points == 0:
        raise invalid("config_space: empty: no point satisfies the constraints")
    return space, n_points


def _declares_library(body: VariantCreate) -> bool:
    if body.declares_library is not None:
        return body.declares_library
    return bool(declared_literals(body.source).get("USES_LIBRARY", False))


@router.post("", response_model=VariantCreated, status_code=201,
             responses={413: {"description": "source too large"}, 200: {"model": VariantCreated,
                                                                       "description": "already known"}})
async def create_variant(body: VariantCreate, request: Request, settings: SettingsDep,
                         response: Response) -> VariantCreated:
    # Submissions are hot: the parse, the checks and the database work in one worker-thread hop, on a
    # plain autocommit connection (a new variant is one INSERT; see db/queries/variants.put_variant).
    return await run_in_threadpool(_create_variant, request.app.state.autocommit_engine, body, settings, response)


def _create_variant(engine: Engine, body: VariantCreate, settings: SettingsDep,
                    response: Response) -> VariantCreated:
    _check_source(body.source, settings.max_source_bytes)
    space, n_points = _check_space(body.slot, body.config_space, settings.max_config_points)
    prov = body.provenance
    declares_library = _declares_library(body)
    with engine.connect() as conn:
        if prov.parent_id is not None and not q.variant_exists(conn, prov.parent_id):
            raise invalid(f"provenance.parent_id: variant {prov.parent_id} does not exist")
        variant_id, digest, created = q.put_variant(
            conn, slot=body.slot, language=body.language, source=body.source,
            config_space={k: v for k, v in space.to_json().items() if k != "constraints"},
            constraints=[c.text for c in space.constraints], n_points=n_points, author=prov.author, agent=prov.agent,
            parent_id=prov.parent_id, notes=prov.notes, declares_library=declares_library)
    response.status_code = 201 if created else 200
    return VariantCreated(id=variant_id, content_hash=digest, created=created)


@router.get("", response_model=list[VariantSummary])
def list_variants(session: SessionDep, slot: str | None = None, author: str | None = None,
                  agent: str | None = None, language: str | None = None, parent_id: int | None = None,
                  limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0)) -> list[VariantSummary]:
    rows = q.list_variants(session, slot=slot, author=author, agent=agent, language=language,
                           parent_id=parent_id, limit=limit, offset=offset)
    return [VariantSummary.model_validate(v) for v in rows]


@router.get("/{variant_id}", response_model=VariantDetail)
def get_variant(variant_id: int, session: SessionDep) -> VariantDetail:
    variant = q.get_variant(session, variant_id)
    if variant is None:
        raise not_found("variant", variant_id)
    return VariantDetail.model_validate(variant, from_attributes=True)
