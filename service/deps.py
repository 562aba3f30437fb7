"""Request dependencies: the DB session and the hooks tests and deployments may swap (app.state)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from db.queries.runs import mark_enqueue_failed

from service.settings import Settings

EnqueueFn = Callable[[list[str], str], object]
PingFn = Callable[[], object]


T = TypeVar("T")


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session. Async, so it costs no worker thread of its own: making a Session does no
    I/O, and closing one that holds no transaction (never used, committed, or closed by run_db)
    does none either; one that still holds a connection is closed in a worker thread."""
    session = request.app.state.session_factory()
    try:
        yield session
    finally:
        if session.in_transaction():
            await run_in_threadpool(session.close)
        else:
            session.close()


async def run_db(session: Session, fn: Callable[..., T], *args: Any) -> T:
    """``fn(session, *args)`` in one worker thread, then the session closed in the same thread: one
    thread hop for a whole handler's database work (async handlers of hot routes use this)."""
    def work() -> T:
        try:
            return fn(session, *args)
        finally:
            session.close()
    return await run_in_threadpool(work)


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def resolve_enqueue(request: Request) -> EnqueueFn | str:
    """app.state.enqueue_runs if set, else workers.dispatch.enqueue_runs; a string says why neither."""
    fn = getattr(request.app.state, "enqueue_runs", None)
    if fn is not None:
        return fn
    try:
        from workers.dispatch import enqueue_runs  # lazy: the API must start without the worker stack
    except ImportError as exc:
        return f"workers.dispatch is not importable: {exc}"
    return enqueue_runs


def send_runs(session: Session, enqueue: EnqueueFn | str, run_ids: list[str], queue: str) -> str | None:
    """Enqueue committed runs; None when sent, else why not. A refused send (no enqueue function, or any broker
    failure) marks the runs stale at once, so the next sweep enqueues them: the runs are never lost."""
    if isinstance(enqueue, str):
        error: str | None = enqueue
    else:
        try:
            enqueue(run_ids, queue)
            return None
        except Exception as exc:  # any broker failure: the runs exist, the sweeper retries
            error = f"enqueue to {queue} failed: {type(exc).__name__}: {exc}"
    mark_enqueue_failed(session, run_ids)
    return error


def resolve_broker_ping(request: Request) -> PingFn | str:
    fn = getattr(request.app.state, "broker_ping", None)
    if fn is not None:
        return fn
    try:
        from workers.dispatch import broker_ping
    except ImportError as exc:
        return f"workers.dispatch.broker_ping is not importable: {exc}"
    return broker_ping


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
