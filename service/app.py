"""create_app(settings): the FastAPI application, its database, hooks and routers."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from db.migrate import upgrade
from db.session import make_engine, make_session_factory
from service import metrics
from service.auth import enforce_policy, install_auth_error_handler
from service.bucket_checks import auto_checks_forever
from service.deps import EnqueueFn, PingFn
from service.errors import install_error_handlers
from service.logging_setup import RequestLog, configure_json_logging
from service.routers import (catalogue, dashboard, exports, health, jobs, leaderboard, searches, tokens, tools, variants,
                             winners)
from service.search_dispatch import enqueue_drive, sweep_searches_forever
from service.settings import Settings
from service.sweeper import sweep_forever

log = logging.getLogger("kerneltune.service")


class BodyLimit:
    """Refuse bodies over the limit before they are read (the per-field limits come after)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.limit:
                resp = JSONResponse({"error": "too_large",
                                     "detail": f"request body is {int(length)} bytes; the limit is {self.limit}"},
                                    status_code=413)
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _enqueue_fn(app: FastAPI, who: str) -> EnqueueFn | None:
    enqueue = app.state.enqueue_runs
    if enqueue is None:
        try:
            from workers.dispatch import enqueue_runs as enqueue
        except ImportError as exc:  # an API without the worker stack cannot enqueue: say so once
            log.warning("no %s: workers.dispatch is not importable (%s)", who, exc)
            return None
    return enqueue


def _start_sweeper(app: FastAPI, settings: Settings) -> asyncio.Task[None] | None:
    enqueue = _enqueue_fn(app, "sweeper")
    if enqueue is None:
        return None
    return asyncio.create_task(sweep_forever(app.state.session_factory, enqueue, settings.sweep_interval_s,
                                             settings.queued_lease_seconds))


def _start_bucket_checks(app: FastAPI, settings: Settings) -> asyncio.Task[None] | None:
    enqueue = _enqueue_fn(app, "automatic bucket checks") if settings.auto_bucket_checks else None
    if enqueue is None:
        return None
    return asyncio.create_task(auto_checks_forever(app.state.session_factory, enqueue,
                                                   settings.auto_bucket_checks_interval_s,
                                                   settings.queued_lease_seconds))


def create_app(settings: Settings | None = None, *, enqueue_runs: EnqueueFn | None = None,
               broker_ping: PingFn | None = None) -> FastAPI:
    """``enqueue_runs`` / ``broker_ping`` replace workers.dispatch's functions (embedding, tests)."""
    settings = settings or Settings.from_env()
    if os.environ.get("KT_LOG_FORMAT", "json") == "json":  # KT_LOG_FORMAT=plain keeps logging as it is
        configure_json_logging(os.environ.get("KT_LOG_LEVEL", "INFO").upper())
    engine = make_engine(settings.database_url)
    # Each statement its own transaction: the hot single-statement paths (GET /v1/jobs/{id}, POST
    # /v1/variants) skip the BEGIN and ROLLBACK/COMMIT round trips. On PostgreSQL a pool of its own
    # whose connections are made in autocommit mode (nothing is switched per checkout, so a
    # connection that died under a server restart fails in the pool's ping and answers 503).
    if engine.dialect.name == "sqlite":
        autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    else:
        autocommit_engine = make_engine(settings.database_url, isolation_level="AUTOCOMMIT")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.migrate_on_startup:
            upgrade(engine=engine)
        sweeper = _start_sweeper(app, settings)
        bucket_checks = _start_bucket_checks(app, settings)
        # Hands a search whose driver died to a new one (it resumes from the database).
        search_sweeper = asyncio.create_task(sweep_searches_forever(
            app.state.session_factory, app.state.enqueue_search or enqueue_drive, settings.sweep_interval_s))
        yield
        search_sweeper.cancel()
        for task in (sweeper, bucket_checks):
            if task is not None:
                task.cancel()
        engine.dispose()
        if engine.dialect.name != "sqlite":  # there it is a view of the same pool
            autocommit_engine.dispose()

    # enforce_policy covers every route, including routers added later: see service/auth.py.
    app = FastAPI(title="kerneltune", version="0.1.0", lifespan=lifespan, dependencies=[Depends(enforce_policy)],
                  description="Kernel variants for the decode path of MoE LLMs: submit, evaluate, rank, export.")
    app.state.settings = settings
    app.state.engine = engine
    app.state.autocommit_engine = autocommit_engine
    app.state.session_factory = make_session_factory(engine)
    app.state.enqueue_runs = enqueue_runs
    app.state.broker_ping = broker_ping
    app.state.enqueue_search = None  # tests may swap the drive-task sender (service/search_dispatch.py)
    app.state.metrics_registry = metrics.make_registry(app.state.session_factory, settings.running_lease_seconds)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestLog)
    install_error_handlers(app)
    install_auth_error_handler(app)
    for module in (variants, jobs, searches, leaderboard, winners, exports, catalogue, health, tokens, tools, dashboard,
                   metrics):
        app.include_router(module.router)
    dashboard.mount_static(app)
    return app
