"""The HTTP push endpoints (the server side of the dispatcher's HTTP publisher), bearer
``REALTIME_HUB_SERVICE_KEY``:

* ``POST /api/v1/hubs/messenger/groups/{group}`` (the shape of Azure SignalR Service's REST
  API): body ``{"target": str, "arguments": [...]}``; 202 once delivered locally or published to
  the backplane.
* ``POST /api/v1/hubs/messenger/batch``: body ``{"pushes": [{"group", "target", "arguments"},
  ...]}``; 200 with ``{"results": [{"status": 202}, {"status": 400, "error": "..."}, ...]}``,
  one per push in order, each the status the one-push form would have answered. The batch is
  decoded once and goes out as one publish (one membership barrier locally, one backplane
  message), in order; a push that is invalid fails alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from realtime_dispatch.auth.tokens import service_key_matches
from realtime_dispatch.hub.protocol import invocation_frame
from realtime_dispatch.hub.registry import is_valid_group
from realtime_dispatch.push import MAX_BATCH_BYTES, MAX_BATCH_PUSHES, MAX_PUSH_BYTES, JsonValue

if TYPE_CHECKING:
    from realtime_dispatch.hub.runtime import Hub

log = structlog.get_logger(__name__)

MAX_TARGET_CHARS = 128
UNAVAILABLE = "hub unavailable, retry later"


def _problem(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"error": detail}, status_code=status)


def _invocation(target: object, arguments: object) -> bytes | str:
    """The record of one push, or what is wrong with it."""
    if not isinstance(target, str) or not 0 < len(target) <= MAX_TARGET_CHARS:
        return "target must be a non-empty string"
    if not isinstance(arguments, list):
        return "arguments must be an array"
    return invocation_frame(target, arguments)


async def push_to_group(hub: Hub, request: Request) -> Response:
    if not service_key_matches(request.headers, hub.options.service_key):
        log.info("push_refused", code="Unauthorized")
        return _problem(401, "missing or wrong service key")
    group = request.path_params["group"]
    if not is_valid_group(group):
        return _problem(400, "invalid group name")
    body = await request.body()
    if len(body) > MAX_PUSH_BYTES:
        return _problem(413, "body too large")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _problem(400, "body is not JSON")
    if not isinstance(value, dict):
        return _problem(400, "body must be an object")
    frame = _invocation(value.get("target"), value.get("arguments", []))
    if isinstance(frame, str):
        return _problem(400, frame)
    [result] = await hub.publish_frames([(group, frame)])
    if result is not None:
        log.warning("push_failed", code=result.code)
        return _problem(503, UNAVAILABLE)
    return Response(status_code=202)


async def push_batch(hub: Hub, request: Request) -> Response:
    if not service_key_matches(request.headers, hub.options.service_key):
        log.info("push_refused", code="Unauthorized")
        return _problem(401, "missing or wrong service key")
    body = await request.body()
    if len(body) > MAX_BATCH_BYTES:
        return _problem(413, "body too large")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _problem(400, "body is not JSON")
    pushes = value.get("pushes") if isinstance(value, dict) else None
    if not isinstance(pushes, list):
        return _problem(400, 'body must be an object with a "pushes" array')
    if len(pushes) > MAX_BATCH_PUSHES:
        return _problem(413, f"more than {MAX_BATCH_PUSHES} pushes")
    answers: list[dict[str, JsonValue]] = [{"status": 202}] * len(pushes)
    items: list[tuple[str, bytes]] = []
    positions: list[int] = []
    for index, push in enumerate(pushes):
        problem = _checked(push)
        if isinstance(problem, tuple):
            items.append(problem)
            positions.append(index)
        else:
            answers[index] = problem
    results = await hub.publish_frames(items) if items else []
    failed = None
    for index, result in zip(positions, results, strict=True):
        if result is not None:
            failed = result
            answers[index] = {"status": 503, "error": UNAVAILABLE}
    if failed is not None:
        log.warning("push_failed", code=failed.code, pushes=len(items))
    return Response(orjson.dumps({"results": answers}), media_type="application/json")


def _checked(push: object) -> tuple[str, bytes] | dict[str, JsonValue]:
    """One push of a batch as ``(group, record)``, or the answer refusing it."""
    if not isinstance(push, dict):
        return {"status": 400, "error": "push must be an object"}
    group = push.get("group")
    if not isinstance(group, str) or not is_valid_group(group):
        return {"status": 400, "error": "invalid group name"}
    frame = _invocation(push.get("target"), push.get("arguments", []))
    if isinstance(frame, str):
        return {"status": 400, "error": frame}
    if len(frame) > MAX_PUSH_BYTES:
        return {"status": 413, "error": "push too large"}
    return group, frame
