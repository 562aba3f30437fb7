"""/v1/tokens: create (secret shown once), list, revoke (admin); /v1/tokens/me: a token's own usage."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from db.models import ApiToken
from db.queries import tokens as q
from service.auth import PrincipalDep, forget_tokens
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES, ApiError, not_found

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], responses=ERROR_RESPONSES)

Scope = Literal["read", "submit", "export", "admin"]


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$",
                      description="user or agent name; recorded as submitted_by on its jobs")
    scopes: list[Scope] = Field(min_length=1)
    gpu_seconds_per_day: float | None = Field(default=None, gt=0, description="child wall seconds per UTC day")
    max_concurrent_jobs: int | None = Field(default=None, gt=0, description="queued + running jobs")


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str = Field(description="first characters of the secret, to tell tokens apart")
    scopes: list[str]
    gpu_seconds_per_day: float | None
    max_concurrent_jobs: int | None
    created_at: datetime
    last_used_at: datetime | None
    revoked: bool


class TokenCreated(TokenOut):
    secret: str = Field(description="shown once; only its sha256 is stored")


class TokenUsage(BaseModel):
    token: TokenOut
    active_jobs: int
    gpu_seconds_today: float


def token_out(t: ApiToken) -> TokenOut:
    return TokenOut(id=t.id, name=t.name, prefix=t.prefix, scopes=list(t.scopes),
                    gpu_seconds_per_day=t.gpu_seconds_per_day, max_concurrent_jobs=t.max_concurrent_jobs,
                    created_at=t.created_at, last_used_at=t.last_used_at, revoked=t.revoked_at is not None)


@router.post("", response_model=TokenCreated, status_code=201)
def create_token(body: TokenCreate, session: SessionDep) -> TokenCreated:
    try:
        token, secret = q.create_token(session, name=body.name, scopes=list(body.scopes),
                                       gpu_seconds_per_day=body.gpu_seconds_per_day,
                                       max_concurrent_jobs=body.max_concurrent_jobs)
    except IntegrityError:
        session.rollback()
        raise ApiError(409, "conflict", f"a token named {body.name!r} already exists") from None
    return TokenCreated(**token_out(token).model_dump(), secret=secret)


@router.get("", response_model=list[TokenOut])
def list_tokens(session: SessionDep) -> list[TokenOut]:
    return [token_out(t) for t in q.list_tokens(session)]


@router.get("/me", response_model=TokenUsage)
def whoami(principal: PrincipalDep, session: SessionDep) -> TokenUsage:
    token = session.get(ApiToken, principal.id)
    assert token is not None  # authenticated a moment ago; tokens are never deleted
    use = q.usage(session, principal.id)
    return TokenUsage(token=token_out(token), active_jobs=use.active_jobs, gpu_seconds_today=use.gpu_seconds_today)


@router.post("/{name}/revoke", response_model=TokenOut)
def revoke_token(name: str, request: Request, session: SessionDep) -> TokenOut:
    token = q.get_by_name(session, name)
    if token is None:
        raise not_found("token", repr(name))
    q.revoke(session, token)
    forget_tokens(request.app)  # after the commit: this process refuses the secret from the next request on
    return token_out(token)
