"""Bearer-token authentication, scopes, quotas and the embedded default's local admin token.

Every route of the app is covered by one policy (``enforce_policy``, an app-wide dependency) so a
router added later is protected without doing anything: reads need ``read``, writes ``submit``,
``/v1/exports`` writes ``export``, ``/v1/tokens`` ``admin``; only probes, /metrics and the dashboard's
static page are public. ``admin`` holds every scope.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from db.models import ApiToken, Job, utcnow
from db.queries import tokens as q
from service.client import ADMIN_TOKEN_FILE
from service.errors import ApiError

log = logging.getLogger("kerneltune.auth")

SCOPES = ("read", "submit", "export", "admin")
PUBLIC_PATHS = frozenset({"/v1/health", "/v1/ready", "/metrics", "/", "/dashboard"})
PUBLIC_PREFIXES = ("/static/",)
SELF_PATH = "/v1/tokens/me"  # any valid token may read its own usage
LOCAL_ADMIN_NAME = "local-admin"
_TOUCH_EVERY = timedelta(minutes=1)  # last_used_at is a hint: one write a minute per token, not per request

bearer = HTTPBearer(auto_error=False, description="API token: `Authorization: Bearer kt_...`")


class HeaderError(ApiError):
    """An ApiError that carries response headers (WWW-Authenticate on 401, Retry-After on 429)."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str]):
        super().__init__(status, code, detail)
        self.headers = headers


def install_auth_error_handler(app: FastAPI) -> None:
    @app.exception_handler(HeaderError)
    async def _headers(_: Request, exc: HeaderError) -> JSONResponse:
        return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=exc.status, headers=exc.headers)


@dataclass(frozen=True)
class Principal:
    id: int
    name: str
    scopes: frozenset[str]
    gpu_seconds_per_day: float | None
    max_concurrent_jobs: int | None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    def has(self, scope: str) -> bool:
        return self.is_admin or scope in self.scopes

    def can_see(self, job: Job) -> bool:
        return not job.private or self.is_admin or job.token_id == self.id

    def owns(self, job: Job) -> bool:
        return self.is_admin or job.token_id == self.id


def required_scope(method: str, path: str) -> str | None:
    """None: public. "": any valid token. Else the scope the request needs."""
    if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
        return None
    if path == SELF_PATH:
        return ""
    if path == "/v1/tokens" or path.startswith("/v1/tokens/"):
        return "admin"
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    if path == "/v1/exports" or path.startswith("/v1/exports/"):
        return "export"
    return "submit"


def _unauthorized(detail: str) -> HeaderError:
    return HeaderError(401, "unauthorized", detail, {"WWW-Authenticate": 'Bearer realm="kerneltune"'})


class PrincipalCache:
    """Live tokens this process verified lately, by the sha256 of the secret (never the secret), each
    for ``ttl`` seconds: a cached request skips the database and the worker thread entirely.

    Only successes are cached: an unknown or revoked secret is looked up every time. A revoke (or a
    rotation) through this process clears the cache at once, so it answers 401 from the next request
    on; another API process (uvicorn --workers N, a second replica) refuses the old secret within
    ``ttl`` seconds. ``ttl`` 0 turns the cache off (every request reads the token row)."""

    MAX_ENTRIES = 10_000

    def __init__(self, ttl: float):
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a lookup that began before a revoke is not cached

    def get(self, digest: str) -> Principal | None:
        hit = self._entries.get(digest)
        if hit is None:
            return None
        if hit[0] <= time.monotonic():
            self._entries.pop(digest, None)
            return None
        return hit[1]

    def generation(self) -> int:
        return self._generation

    def put(self, digest: str, principal: Principal, generation: int) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if generation != self._generation:
                return
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + self.ttl, principal)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()


def principal_cache(app: FastAPI) -> PrincipalCache:
    cache = getattr(app.state, "principal_cache", None)
    if cache is None:
        cache = app.state.principal_cache = PrincipalCache(getattr(app.state.settings, "auth_cache_seconds", 0.0))
    return cache


def forget_tokens(app: FastAPI) -> None:
    """Call after revoking or rotating a token (or changing its scopes or quotas)."""
    principal_cache(app).clear()


def _lookup(factory: sessionmaker[Session], digest: str) -> Principal | None:
    with factory() as session:
        token = q.get_by_hash(session, digest)
        if token is None:
            return None
        now = utcnow()
        if token.last_used_at is None or now - token.last_used_at > _TOUCH_EVERY:
            q.touch(session, token.id, now)
        return Principal(id=token.id, name=token.name, scopes=frozenset(token.scopes),
                         gpu_seconds_per_day=token.gpu_seconds_per_day,
                         max_concurrent_jobs=token.max_concurrent_jobs)


async def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    if credentials is None or not credentials.credentials:
        raise _unauthorized("this endpoint needs an API token: send 'Authorization: Bearer <token>' "
                            "(kerneltune tokens create; the embedded service writes one to <data_dir>/admin-token)")
    digest = q.hash_secret(credentials.credentials)
    cache = principal_cache(request.app)
    principal = cache.get(digest)
    if principal is None:
        generation = cache.generation()
        principal = await run_in_threadpool(_lookup, request.app.state.session_factory, digest)
        if principal is None:
            raise _unauthorized("unknown or revoked API token")
        cache.put(digest, principal, generation)
    request.state.principal = principal
    return principal


async def enforce_policy(request: Request,
                         credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    """App-wide dependency: authenticate and check the scope the route needs (see required_scope).
    Async: a cached token costs no worker thread; a lookup runs in one (service/deps.py)."""
    # scope["path"], not request.url.path: the same decision (the URL only escapes ?, # and \, which no
    # policy path holds) without building a URL object per request.
    scope = required_scope(request.method, request.scope["path"])
    if scope is None:
        return
    principal = await authenticate(request, credentials)
    if scope and not principal.has(scope):
        raise ApiError(403, "forbidden", f"token {principal.name!r} lacks the {scope!r} scope needed for "
                                         f"{request.method} {request.url.path} (it has: {', '.join(sorted(principal.scopes))})")


async def current_principal(request: Request,
                            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
    return await authenticate(request, credentials)


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def check_quota(session: Session, principal: Principal) -> None:
    """Refuse a new job (429) when the token is at its concurrency limit or over today's GPU-seconds."""
    if principal.max_concurrent_jobs is None and principal.gpu_seconds_per_day is None:
        return
    now = utcnow()
    use = q.usage(session, principal.id, now)
    if principal.max_concurrent_jobs is not None and use.active_jobs >= principal.max_concurrent_jobs:
        raise HeaderError(429, "quota_exceeded",
                          f"token {principal.name!r} has {use.active_jobs} queued or running jobs; its limit is "
                          f"{principal.max_concurrent_jobs}. Wait for one to finish or cancel one.",
                          {"Retry-After": "30"})
    if principal.gpu_seconds_per_day is not None and use.gpu_seconds_today >= principal.gpu_seconds_per_day:
        reset = q.start_of_day(now) + timedelta(days=1)
        raise HeaderError(429, "quota_exceeded",
                          f"token {principal.name!r} used {use.gpu_seconds_today:.0f} of its "
                          f"{principal.gpu_seconds_per_day:.0f} GPU-seconds today; the quota resets at "
                          f"{reset.isoformat()} (00:00 UTC)",
                          {"Retry-After": str(max(1, int((reset - now).total_seconds())))})


# --- the embedded default's local admin token ------------------------------------------------------

def admin_token_path(data_dir: Path) -> Path:
    return Path(data_dir) / ADMIN_TOKEN_FILE


def _write_private(path: Path, text: str) -> None:
    """Written to a 0600 temp file then renamed: the secret is never readable by others, even briefly."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is filtered by the umask; make sure
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_local_admin_token(factory: sessionmaker[Session], data_dir: Path) -> tuple[Path, bool]:
    """On first start (no valid token in <data_dir>/admin-token) create or rotate the local admin token
    and write its secret there with mode 0600. Returns the path and whether a new secret was written."""
    path = admin_token_path(data_dir)
    with factory() as session:
        if path.exists():
            existing = q.get_by_secret(session, path.read_text().strip())
            if existing is not None and "admin" in existing.scopes:
                return path, False
        token: ApiToken | None = q.get_by_name(session, LOCAL_ADMIN_NAME)
        if token is None:
            _, secret = q.create_token(session, name=LOCAL_ADMIN_NAME, scopes=["admin"])
        else:  # the file was lost or belongs to another database: a new secret, the old one dies
            token.scopes = ["admin"]
            secret = q.rotate_secret(session, token)
    _write_private(path, secret + "\n")
    log.info("wrote the local admin token to %s", path)
    return path, True
