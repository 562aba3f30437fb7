"""The dashboard: a static page (service/static/, no build step) that polls the JSON API with a read
token kept in the browser's localStorage, plus the one JSON view it needs that the API lacks: a
variant's line diff against its parent."""

from __future__ import annotations

import difflib
import html
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from db.queries import variants as variants_q
from service.auth import admin_token_path
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES, not_found

STATIC = Path(__file__).resolve().parent.parent / "static"
router = APIRouter(tags=["dashboard"], responses=ERROR_RESPONSES)


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")


def _token_hint(request: Request) -> str:
    """Where a token can be found: the path of the embedded admin token file, never its contents."""
    path = admin_token_path(request.app.state.settings.data_dir)
    if path.exists():
        return f"The embedded service's admin token is in {path} (readable by its owner only)."
    return "Create one with: kerneltune tokens create --name you --scopes read"


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request) -> HTMLResponse:
    text = (STATIC / "index.html").read_text().replace("{{TOKEN_HINT}}", html.escape(_token_hint(request)))
    # The page is static and its data comes from the API with the user's token: no caching surprises.
    return HTMLResponse(text, headers={"Cache-Control": "no-store"})


class DiffLine(BaseModel):
    op: Literal[" ", "+", "-", "@"]
    text: str


class VariantDiff(BaseModel):
    variant_id: int
    parent_id: int | None
    added: int
    removed: int
    lines: list[DiffLine]


@router.get("/v1/dashboard/variants/{variant_id}/diff", response_model=VariantDiff)
def variant_diff(variant_id: int, session: SessionDep, context: int = 3) -> VariantDiff:
    """Unified line diff of a variant's source against its parent's (empty when it has no parent)."""
    variant = variants_q.get_variant(session, variant_id)
    if variant is None:
        raise not_found("variant", variant_id)
    parent = variants_q.get_variant(session, variant.parent_id) if variant.parent_id is not None else None
    if parent is None:
        return VariantDiff(variant_id=variant_id, parent_id=None, added=0, removed=0, lines=[])
    lines: list[DiffLine] = []
    diff = difflib.unified_diff(parent.source.splitlines(), variant.source.splitlines(),
                                f"variant {parent.id}", f"variant {variant.id}", lineterm="", n=max(0, min(context, 50)))
    for i, raw in enumerate(diff):
        if i < 2:  # the ---/+++ file headers; a source line may itself start with "--"
            continue
        op = "@" if raw.startswith("@@") else raw[:1] or " "
        lines.append(DiffLine(op=op if op in " +-@" else " ", text=raw if op == "@" else raw[1:]))
    return VariantDiff(variant_id=variant_id, parent_id=parent.id, added=sum(1 for x in lines if x.op == "+"),
                       removed=sum(1 for x in lines if x.op == "-"), lines=lines)
