"""``GET /api/sync`` as FastAPI routes, mounted by the command line's app beside the hub (and
the reference messenger's REST API when it is served): the route answers its own errors, in
the REST API's ``{"error", "message"}`` shape, so it works in any FastAPI app (an adopter's
``hub`` mounts it without the REST API)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter
from starlette.routing import BaseRoute

from realtime_dispatch.auth.tokens import (
    AuthError,
    KeysUnavailable,
    TokenVerifier,
    bearer,
    www_authenticate,
)
from realtime_dispatch.contracts.sync import SyncPageOut
from realtime_dispatch.errors import DatabaseUnavailable
from realtime_dispatch.sync.cursor import CursorError
from realtime_dispatch.sync.service import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SyncBusy,
    SyncService,
    SyncTimeout,
)

_ERROR = {"content": {"application/json": {"example": {"error": "code", "message": "text"}}}}


def _error(code: str, message: str, status: int, **headers: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


def sync_routes(
    service: SyncService,
    verifier: TokenVerifier,
    *,
    metrics_registry: CollectorRegistry | None = None,
) -> list[BaseRoute]:
    router = APIRouter(tags=["sync"])
    refused = Counter(
        "messenger_realtime_sync_refused",
        "Sync pages refused: TooManyRequests (the user's bound) or Timeout (statement, pool)",
        ["reason"],
        registry=metrics_registry if metrics_registry is not None else CollectorRegistry(),
    )

    @router.get(
        "/api/sync",
        response_model=SyncPageOut,
        responses={400: _ERROR, 401: _ERROR, 429: _ERROR, 503: _ERROR},
        summary="The caller's events after a cursor (resume without gaps)",
    )
    async def sync(
        request: Request,
        since: Annotated[
            str | None, Query(description="`nextCursor` of the last page; omit to start now.")
        ] = None,
        limit: Annotated[int, Query(description=f"1 to {MAX_LIMIT}.")] = DEFAULT_LIMIT,
    ) -> Response:
        """The events of the caller's groups (`user:{caller}`, and each chat where the caller
        is an active member, from the moment they joined), oldest first, committed after
        `since`; every event is exactly the push's payload. Without `since`: no events and
        the current cursor. An event may come twice (dedupe by `eventId`). A page examines a
        bounded number of log entries: with `more` true, ask again at once from `nextCursor`
        (the page may hold fewer events than `limit`, or none). 429 past the user's
        concurrent pages, 503 past the page's statement timeout: both with `Retry-After`."""
        try:
            user = (await verifier.verify(bearer(request.headers))).user_id
        except AuthError as exc:
            return _error(
                "Unauthorized",
                "a valid bearer token is required",
                401,
                **{"WWW-Authenticate": www_authenticate(exc)},
            )
        except KeysUnavailable:
            return _error("Unavailable", "the identity provider's keys are unavailable", 503)
        if not 1 <= limit <= MAX_LIMIT:
            return _error("InvalidRequest", f"limit: 1 to {MAX_LIMIT}", 400)
        try:
            page = await service.page(user, since, limit)
        except CursorError as exc:
            return _error(exc.code, str(exc), 400)
        except SyncBusy as exc:
            refused.labels(exc.code).inc()
            return _error(exc.code, str(exc), 429, **{"Retry-After": "1"})
        except SyncTimeout as exc:
            refused.labels(exc.code).inc()
            return _error("Unavailable", f"{exc}; retry later", 503, **{"Retry-After": "1"})
        except DatabaseUnavailable:
            return _error("Unavailable", "the database is unavailable; retry later", 503)
        return Response(page.json(), media_type="application/json")

    return list(router.routes)
