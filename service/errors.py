"""One error shape for every failure: {"error": code, "detail": human message} (+ "errors" for 422)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("kerneltune.service")


class ErrorBody(BaseModel):
    error: str
    detail: str
    errors: list[dict[str, Any]] | None = None


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def not_found(what: str, ident: object) -> ApiError:
    return ApiError(404, "not_found", f"{what} {ident} does not exist")


def invalid(detail: str) -> ApiError:
    return ApiError(422, "invalid", detail)


_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large",
               415: "unsupported_media_type", 503: "unavailable"}

# Response docs for the OpenAPI schema: every route may answer these with ErrorBody.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "Invalid input"},
    503: {"model": ErrorBody, "description": "Database unavailable or busy (Retry-After)"},
    507: {"model": ErrorBody, "description": "Database disk full"},
}


def _body(status: int, code: str, detail: str, errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status)


def _loc(loc: Any) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "body"


def _db_error(exc: DBAPIError) -> JSONResponse:
    """Say which DB failure it was, in words a client can act on; the driver's text stays in the log.
    A failed transaction leaves nothing behind; a submission retried with an Idempotency-Key cannot
    duplicate one whose earlier transaction did commit."""
    log.warning("database error: %s", exc.orig)
    text = str(exc.orig).lower()
    if "disk is full" in text or "no space left" in text:
        return _body(507, "storage_full", "the database's disk is full: the request did not "
                                          "complete; free space on the server and retry")
    if "database is locked" in text or "database table is locked" in text:
        resp = _body(503, "database_busy", "the database is locked by another writer: the request "
                                           "did not complete; retry shortly")
    else:
        resp = _body(503, "database_unavailable", "database unavailable: the request did not complete; retry shortly")
    resp.headers["Retry-After"] = "5"
    return resp


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return _body(exc.status, exc.code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        # ctx can hold exception objects: keep only what serialises.
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        detail = "; ".join(f"{_loc(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
        return _body(422, "validation_error", detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _body(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(OperationalError)
    async def _db_down(_: Request, exc: OperationalError) -> JSONResponse:
        return _db_error(exc)

    @app.exception_handler(DataError)
    async def _db_data(_: Request, exc: DataError) -> JSONResponse:
        # The request passed validation but holds a value the database cannot store or compare:
        # an id past PostgreSQL's 32-bit integer (fuzzing found /v1/jobs/2147483648 answering 500),
        # text longer than its column. The client's input, so 422, never 500.
        log.info("database refused a value: %s", exc.orig)
        text = str(exc.orig).lower()
        if "out of range" in text:
            return _body(422, "out_of_range", "a number in the request is outside the range the service stores "
                                              "(ids and counts are 32-bit signed integers: at most 2147483647)")
        if "too long" in text:
            return _body(422, "too_long", "a text value in the request is longer than the service stores")
        return _body(422, "invalid_value", "a value in the request cannot be stored or compared by the database")

    @app.exception_handler(InterfaceError)
    async def _db_gone(_: Request, exc: InterfaceError) -> JSONResponse:  # a connection closed under us
        return _db_error(exc)

    try:  # the driver's own errors, where one escapes SQLAlchemy's wrapping (connection setup paths)
        import psycopg
    except ImportError:
        pass
    else:
        @app.exception_handler(psycopg.OperationalError)
        @app.exception_handler(psycopg.InterfaceError)
        async def _driver_down(_: Request, exc: Exception) -> JSONResponse:
            log.warning("database error (driver): %s", exc)
            resp = _body(503, "database_unavailable", "database unavailable: the request did not complete; retry shortly")
            resp.headers["Retry-After"] = "5"
            return resp

    @app.exception_handler(PoolTimeoutError)
    async def _pool(_: Request, exc: PoolTimeoutError) -> JSONResponse:
        log.warning("database pool exhausted: %s", exc)
        return _body(503, "database_unavailable", "database unavailable (connection pool exhausted)")

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")  # the trace goes to the log, never to the client
        return _body(500, "internal", "internal error; see the service log")
