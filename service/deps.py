"""Request dependencies: the DB session and the hooks tests and deployments may swap (app.state)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.settings import Settings

EnqueueFn = Callable[[list[str], str], object]
PingFn = Callable[[], object]


def get_session(request: Request) -> Iterator[Session]:
    session = request.app.state.session_factory()
    try:
        yield session
    finally:
        session.close()


def get_settings(request: Request) -> Settings:
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
