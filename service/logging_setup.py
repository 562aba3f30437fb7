"""Structured logs: one JSON object per line (time, level, logger, message, job_id, run_id, ...).

``configure_json_logging()`` is for process entry points (the API app, Celery workers); it replaces
only its own handler, so calling it twice does not double the lines. ``log_context(job_id=..,
run_id=..)`` tags every line logged inside it (contextvars: per thread and per asyncio task);
``extra={"job_id": ..}`` on one call works too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_CONTEXT: ContextVar[dict[str, Any]] = ContextVar("kerneltune_log_context", default={})
CONTEXT_KEYS = ("job_id", "run_id", "worker", "token", "method", "path", "status", "duration_ms")
# LogRecord's own attributes: anything else on a record came from extra= and is worth keeping.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_CONTEXT.get())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_json_logging installs (a second call replaces it). Without an explicit
    stream it writes to whatever sys.stderr is at the time (test runners swap it)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream or sys.stderr)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_json_logging(level: int | str = logging.INFO, stream: TextIO | None = None) -> logging.Handler:
    """Route the root logger (and uvicorn's and celery's, which keep their own handlers) to one JSON handler."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(h)
    handler = _OurHandler(stream)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task"):
        lg = logging.getLogger(name)
        lg.handlers = []
        lg.propagate = True
    return handler


class RequestLog:
    """ASGI middleware: one JSON line per API request, with the job id when the route has one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = logging.getLogger("kerneltune.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def _send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            params = scope.get("path_params") or {}  # the router fills these in after matching
            principal = getattr(scope.get("state", {}).get("principal"), "name", None) if isinstance(
                scope.get("state"), dict) else None
            fields = {"method": scope["method"], "path": scope["path"], "status": status,
                      "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                      "job_id": params.get("job_id"), "run_id": params.get("run_id"), "token": principal}
            self.log.info("%s %s %d", scope["method"], scope["path"], status,
                          extra={k: v for k, v in fields.items() if v is not None})
