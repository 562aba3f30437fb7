"""create_app(settings): the FastAPI application, its database, hooks and routers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from db.migrate import upgrade
from db.session import make_engine, make_session_factory
from service.deps import EnqueueFn, PingFn
from service.errors import install_error_handlers
from service.routers import catalogue, health, jobs, leaderboard, variants, winners
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


def _start_sweeper(app: FastAPI, settings: Settings) -> asyncio.Task[None] | None:
    enqueue = app.state.enqueue_runs
    if enqueue is None:
        try:
            from workers.dispatch import enqueue_runs as enqueue
        except ImportError as exc:  # an API without the worker stack cannot re-enqueue: say so once
            log.warning("no sweeper: workers.dispatch is not importable (%s)", exc)
            return None
    return asyncio.create_task(sweep_forever(app.state.session_factory, enqueue, settings.sweep_interval_s,
                                             settings.queued_lease_seconds))


def create_app(settings: Settings | None = None, *, enqueue_runs: EnqueueFn | None = None,
               broker_ping: PingFn | None = None) -> FastAPI:
    """``enqueue_runs`` / ``broker_ping`` replace workers.dispatch's functions (embedding, tests)."""
    settings = settings or Settings.from_env()
    engine = make_engine(settings.database_url)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.migrate_on_startup:
            upgrade(engine=engine)
        sweeper = _start_sweeper(app, settings)
        yield
        if sweeper is not None:
            sweeper.cancel()
        engine.dispose()

    app = FastAPI(title="kerneltune", version="0.1.0", lifespan=lifespan,
                  description="Kernel variants for the decode path of MoE LLMs: submit, evaluate, rank, export.")
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = make_session_factory(engine)
    app.state.enqueue_runs = enqueue_runs
    app.state.broker_ping = broker_ping
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    install_error_handlers(app)
    for module in (variants, jobs, leaderboard, winners, catalogue, health):
        app.include_router(module.router)
    return app
