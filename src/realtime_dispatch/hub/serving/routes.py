"""The hub's HTTP and WebSocket routes, bound to one :class:`~.runtime.Hub`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from realtime_dispatch.delivery.push import BATCH_PATH, MAX_BATCH_BYTES
from realtime_dispatch.edge.request_guard import BodyRule
from realtime_dispatch.hub.connections.caps import ConnectionRefused
from realtime_dispatch.hub.serving.push_api import MAX_BODY_BYTES, BatchEndpoint, push_to_group
from realtime_dispatch.hub.transports.common import Refused, identity_of
from realtime_dispatch.hub.transports.endpoint import serve_websocket
from realtime_dispatch.hub.transports.http import HttpTransportEndpoint
from realtime_dispatch.hub.transports.negotiate import negotiate_body

if TYPE_CHECKING:
    from realtime_dispatch.hub.runtime import Hub

log = structlog.get_logger(__name__)

HUB_PATH = "/hubs/messenger"
PUSH_PATH = "/api/v1/hubs/messenger/groups/{group:str}"
NEGOTIATE_MAX_BODY_BYTES = 1024
"""Negotiate takes no body (clients send an empty POST)."""
HUB_POST_MAX_BODY_BYTES = 1 << 20
"""A transport's POST of hub messages (long polling): as much as one WebSocket frame."""


def hub_body_rules() -> list[BodyRule]:
    """Credentials and body limits of the hub's HTTP routes, for
    :class:`~realtime_dispatch.edge.request_guard.RequestGuard`."""
    post = frozenset({"POST"})
    return [
        BodyRule(f"{HUB_PATH}/negotiate", NEGOTIATE_MAX_BODY_BYTES, "token", post),
        BodyRule(HUB_PATH, HUB_POST_MAX_BODY_BYTES, "token", post),
        BodyRule("/api/v1/hubs/messenger/groups/[^/]+", MAX_BODY_BYTES, "service_key", post),
        BodyRule(BATCH_PATH, MAX_BATCH_BYTES, "service_key", post),
    ]


def hub_routes(hub: Hub) -> list[BaseRoute]:
    """The hub's HTTP face: negotiate, the WebSocket, Server-Sent Events and long polling, the
    push endpoints (one push, a batch), ``/healthz``, ``/readyz`` and ``/metrics``, for a
    Starlette or FastAPI app to mount."""

    async def negotiate(request: Request) -> Response:
        try:
            identity = await identity_of(hub, request, "negotiate")
        except Refused as refused:
            return refused.response
        user_id = identity.user_id
        try:
            version = int(request.query_params.get("negotiateVersion", "0"))
        except ValueError:
            return PlainTextResponse("Invalid negotiateVersion", status_code=400)
        stateful = request.query_params.get("useStatefulReconnect") == "true"
        now = asyncio.get_running_loop().time()
        try:
            hub.admit_connection(user_id, "negotiate")  # counts its refusals
        except ConnectionRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        address = request.client.host if request.client else None  # behind a proxy: its client
        negotiation = hub.negotiations.create(user_id, stateful=stateful, now=now, address=address)
        return JSONResponse(negotiate_body(negotiation, version=version))

    async def websocket(ws: WebSocket) -> None:
        await serve_websocket(hub, ws)

    async def push(request: Request) -> Response:
        return await push_to_group(hub, request)

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        ready = hub.is_ready()
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "connections": len(hub.connections)},
            status_code=200 if ready else 503,
        )

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(hub.metrics_registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route(f"{HUB_PATH}/negotiate", negotiate, methods=["POST"]),
        WebSocketRoute(HUB_PATH, websocket),
        Route(HUB_PATH, HttpTransportEndpoint(hub), methods=["GET", "POST", "DELETE"]),
        Route(PUSH_PATH, push, methods=["POST"]),
        Route(BATCH_PATH, BatchEndpoint(hub), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
