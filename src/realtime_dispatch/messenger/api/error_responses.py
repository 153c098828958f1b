"""Every refusal of the REST API, answered in one place (a domain refusal with its class's
``status``).

Body: ``{"error": <code>, "message": <short text>}`` (validation errors add ``details``: where
and what, never the rejected value). Messages carry no ids or bodies, so nothing here can leak
a message or a token into a response or a log.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from realtime_dispatch.auth.tokens import AuthError, KeysUnavailable, www_authenticate
from realtime_dispatch.database.connections import is_unavailable
from realtime_dispatch.messenger.api.send_rate import retry_after
from realtime_dispatch.messenger.refusals import DomainError

log = structlog.get_logger(__name__)


def _body(code: str, message: str, status: int, **extra: object) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status)


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


async def _domain(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    response = _body(exc.code, str(exc), exc.status)
    if exc.retry_after is not None:
        response.headers["Retry-After"] = retry_after(exc.retry_after)
    return response


async def _auth(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AuthError)
    response = _body("Unauthorized", "a valid bearer token is required", 401)
    response.headers["WWW-Authenticate"] = www_authenticate(exc)
    return response


def _reason(error: Any) -> str:
    """The error's text; for a body that is not JSON, also why (a lone surrogate, say)."""
    message = str(error.get("msg"))
    ctx = error.get("ctx") or {}
    if error.get("type") == "json_invalid" and ctx.get("error"):
        return f"{message}: {ctx['error']}"
    return message


async def _keys_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KeysUnavailable)
    return _body("Unavailable", "the identity provider's keys are unavailable; retry later", 503)


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _reason(e), "type": e["type"]}
        for e in exc.errors()
    ]
    message = "; ".join(f"{_location(tuple(e['loc']))}: {e['msg']}" for e in details)
    return _body("InvalidRequest", message or "invalid request", 422, details=details)


async def _http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(
        {"error": "HttpError", "message": str(exc.detail)},
        status_code=exc.status_code,
        headers=exc.headers,
    )


# SQLSTATE class 22, "data exception": the request carried a value PostgreSQL cannot store (the
# command's transaction rolled back, nothing was written). 22021: a NUL character in text.
_DATA_EXCEPTION_CLASS = "22"
_NUL_IN_TEXT = "22021"


async def _database(_request: Request, exc: Exception) -> JSONResponse:
    sqlstate = str(getattr(exc, "sqlstate", "") or "")
    if sqlstate.startswith(_DATA_EXCEPTION_CLASS):
        message = (
            "text fields must not contain NUL characters"
            if sqlstate == _NUL_IN_TEXT
            else "a value cannot be stored (out of range or malformed)"
        )
        return _body("InvalidRequest", message, 422)
    if is_unavailable(exc):
        log.warning("api_database_unavailable", error=type(exc).__name__)
        return _body("Unavailable", "the database is unavailable; retry later", 503)
    log.error("api_database_error", error=type(exc).__name__)
    return _body("Internal", "internal error", 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(AuthError, _auth)
    app.add_exception_handler(KeysUnavailable, _keys_unavailable)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(asyncpg.PostgresError, _database)
    app.add_exception_handler(asyncpg.InterfaceError, _database)
    app.add_exception_handler(OSError, _database)
