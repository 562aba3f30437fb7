"""GET /v1/health (liveness) and /v1/ready (database and broker reachable)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.deps import resolve_broker_ping
from service.errors import ErrorBody
from service.schemas import Health, Ready

router = APIRouter(prefix="/v1", tags=["health"])


@router.get("/health", response_model=Health)
def health() -> Health:
    return Health(status="ok")


@router.get("/ready", response_model=Ready, responses={503: {"model": ErrorBody, "description": "a dependency is down"}})
def ready(request: Request) -> Ready | JSONResponse:
    problems: list[str] = []
    try:
        with request.app.state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        database = "ok"
    except Exception as exc:  # any failure to reach the database means not ready
        database = f"unreachable: {type(exc).__name__}"
        problems.append(f"database {database}")
    ping = resolve_broker_ping(request)
    if isinstance(ping, str):
        broker = f"unknown: {ping}"
        problems.append(f"broker {broker}")
    else:
        try:
            ping()
            broker = "ok"
        except Exception as exc:  # the broker client raises many kinds
            broker = f"unreachable: {type(exc).__name__}: {exc}"
            problems.append(f"broker {broker}")
    if problems:
        return JSONResponse({"error": "not_ready", "detail": "; ".join(problems), "status": "not_ready",
                             "database": database, "broker": broker}, status_code=503)
    return Ready(status="ready", database=database, broker=broker)
