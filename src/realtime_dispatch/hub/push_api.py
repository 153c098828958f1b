"""``POST /api/v1/hubs/messenger/groups/{group}``: the server side of the HTTP publisher (the shape
of Azure SignalR Service's REST API). Body ``{"target": str, "arguments": [...]}``, bearer
``REALTIME_HUB_SERVICE_KEY``; 202 once delivered locally or published to the backplane."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from realtime_dispatch.auth.tokens import service_key_matches
from realtime_dispatch.hub.protocol import invocation_frame
from realtime_dispatch.hub.registry import is_valid_group
from realtime_dispatch.push import hub_problem

if TYPE_CHECKING:
    from realtime_dispatch.hub.runtime import Hub

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 256 * 1024
MAX_TARGET_CHARS = 128


def _problem(status: int, detail: str, code: str) -> JSONResponse:
    return JSONResponse(hub_problem(detail, code), status_code=status)


async def push_to_group(hub: Hub, request: Request) -> Response:
    if not service_key_matches(request.headers, hub.options.service_key):
        log.info("push_refused", code="Unauthorized")
        return _problem(401, "missing or wrong service key", "Unauthorized")
    group = request.path_params["group"]
    if not is_valid_group(group):
        return _problem(400, "invalid group name", "InvalidGroup")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return _problem(413, "body too large", "BodyTooLarge")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _problem(400, "body is not JSON", "InvalidJson")
    if not isinstance(value, dict):
        return _problem(400, "body must be an object", "InvalidBody")
    target, arguments = value.get("target"), value.get("arguments", [])
    if not isinstance(target, str) or not 0 < len(target) <= MAX_TARGET_CHARS:
        return _problem(400, "target must be a non-empty string", "InvalidTarget")
    if not isinstance(arguments, list):
        return _problem(400, "arguments must be an array", "InvalidArguments")
    [result] = await hub.publish_frames([(group, invocation_frame(target, arguments))])
    if result is not None:
        log.warning("push_failed", code=result.code)
        return _problem(503, "hub unavailable, retry later", "HubUnavailable")
    return Response(status_code=202)
