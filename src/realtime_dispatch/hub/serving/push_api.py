"""The HTTP push endpoints (the server side of the dispatcher's HTTP publisher), bearer
``REALTIME_HUB_SERVICE_KEY``:

* ``POST /api/v1/hubs/messenger/groups/{group}`` (the shape of Azure SignalR Service's REST
  API): body ``{"target": str, "arguments": [...]}``; 202 once delivered locally or published to
  the backplane.
* ``POST /api/v1/hubs/messenger/batch``: body ``{"pushes": [{"group", "target", "arguments"},
  ...]}``; 200 with ``{"results": [{"status": 202}, {"status": 400, "error": "..."}, ...]}``,
  one per push in order, each the status the one-push form would have answered (with its
  ``code``; every refusal of the hub's own, whole or per push, carries
  ``"source": "realtime-dispatch-hub"`` at the top level of the body). The batch is
  decoded once and goes out as one publish (one membership barrier locally, one backplane
  message), in order; a push that is invalid fails alone. An optional ``"marks"`` (the
  worker's membership marks, :func:`~realtime_dispatch.delivery.marks.received_marks`) spares
  that barrier when this hub heard one of them; a mark it never heard costs only the barrier.
"""

from __future__ import annotations

import hmac
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from realtime_dispatch.auth.tokens import service_key_matches
from realtime_dispatch.delivery.marks import MAX_RECEIVED, MAX_TOKEN_CHARS, received_marks
from realtime_dispatch.delivery.push import (
    MAX_BATCH_BYTES,
    MAX_BATCH_PUSHES,
    MAX_PUSH_BYTES,
    hub_problem,
)
from realtime_dispatch.edge.direct_post import Answer
from realtime_dispatch.hub.connections.registry import is_valid_group
from realtime_dispatch.hub.wire.protocol import invocation_frame
from realtime_dispatch.values.json_types import JsonValue

if TYPE_CHECKING:
    from realtime_dispatch.hub.runtime import Hub

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = MAX_PUSH_BYTES
MAX_TARGET_CHARS = 128
UNAVAILABLE = "hub unavailable, retry later"


def _problem(status: int, detail: str, code: str) -> JSONResponse:
    return JSONResponse(hub_problem(detail, code), status_code=status)


def _invocation(target: object, arguments: object) -> bytes | tuple[str, str]:
    """The record of one push, or what is wrong with it (detail, code)."""
    if not isinstance(target, str) or not 0 < len(target) <= MAX_TARGET_CHARS:
        return "target must be a non-empty string", "InvalidTarget"
    if not isinstance(arguments, list):
        return "arguments must be an array", "InvalidArguments"
    return invocation_frame(target, arguments)


async def push_to_group(hub: Hub, request: Request) -> Response:
    if not service_key_matches(request.headers, hub.options.service_key):
        log.info("push_refused", code="Unauthorized")
        return _problem(401, "missing or wrong service key", "Unauthorized")
    group = request.path_params["group"]
    if not is_valid_group(group):
        return _problem(400, "invalid group name", "InvalidGroup")
    body = await request.body()
    if len(body) > MAX_PUSH_BYTES:
        return _problem(413, "body too large", "BodyTooLarge")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _problem(400, "body is not JSON", "InvalidJson")
    if not isinstance(value, dict):
        return _problem(400, "body must be an object", "InvalidBody")
    frame = _invocation(value.get("target"), value.get("arguments", []))
    if isinstance(frame, tuple):
        return _problem(400, *frame)
    [result] = await hub.publish_frames([(group, frame)], ())
    if result is not None:
        log.warning("push_failed", code=result.code)
        return _problem(503, UNAVAILABLE, "HubUnavailable")
    return Response(status_code=202)


def _error(detail: str, code: str) -> bytes:
    return orjson.dumps(hub_problem(detail, code))


BODY_TOO_LARGE: Answer = 413, _error("body too large", "BodyTooLarge")
INTERNAL_ERROR: Answer = 500, _error("internal error", "Internal")


class BatchEndpoint:
    """``POST /api/v1/hubs/messenger/batch`` as a plain ASGI app: the request is read and
    answered straight from the ASGI messages, without a Request and Response object per call
    (a fixed cost of every batch, paid by the worker's every dispatcher batch). The hub's own
    HTTP protocol answers it without the app (:class:`DirectBatch`)."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, answer = await self._answer(scope, receive)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(answer)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        refusal = _unauthorized(self._hub, Headers(scope=scope))
        if refusal is not None:
            return refusal
        parts: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return 400, _error("client disconnected", "Disconnected")
            part = message.get("body", b"")
            size += len(part)
            if size > MAX_BATCH_BYTES:
                return BODY_TOO_LARGE
            parts.append(part)
            more = message.get("more_body", False)
        answer = batch_answer(self._hub, parts[0] if len(parts) == 1 else b"".join(parts))
        return answer if isinstance(answer, tuple) else await answer


class DirectBatch:
    """The batch endpoint as the hub's HTTP protocol serves it itself, without the ASGI app
    (:func:`~realtime_dispatch.edge.http_protocol.guarded_http_protocol`'s ``posts``): the same
    answers as :class:`BatchEndpoint`. The key is checked on the raw header: an
    ``Authorization`` that is exactly ``Bearer <key>`` (what the worker sends) is one
    constant-time comparison of bytes; any other form of it goes through
    :func:`service_key_matches`, as the app's check does."""

    __slots__ = ("_expected", "_hub")
    max_body_bytes = MAX_BATCH_BYTES
    too_large = BODY_TOO_LARGE
    failure = INTERNAL_ERROR

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        key = hub.options.service_key
        plain = key is not None and key.isascii() and key == key.strip()  # as bearer() reads it
        self._expected = b"Bearer " + key.encode() if key and plain else None

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> Answer | None:
        """The answer given at once, before the body is read (a missing or wrong key)."""
        expected = self._expected
        if expected is not None:
            for name, value in headers:
                if name == b"authorization":
                    if hmac.compare_digest(value, expected):
                        return None
                    break
        return _unauthorized(self._hub, Headers(raw=headers))

    def answer(self, body: bytes) -> Answer | Coroutine[Any, Any, Answer]:
        return batch_answer(self._hub, body)


def _unauthorized(hub: Hub, headers: Mapping[str, str]) -> Answer | None:
    if service_key_matches(headers, hub.options.service_key):
        return None
    log.info("push_refused", code="Unauthorized")
    return 401, _error("missing or wrong service key", "Unauthorized")


def batch_answer(hub: Hub, body: bytes) -> Answer | Coroutine[Any, Any, Answer]:
    """The answer to a batch's body; when it has pushes to publish, the coroutine that
    publishes them and gives the answer (the publish is the only wait: its membership
    barrier)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 400, _error("body is not JSON", "InvalidJson")
    pushes = value.get("pushes") if isinstance(value, dict) else None
    if not isinstance(pushes, list):
        return 400, _error('body must be an object with a "pushes" array', "InvalidBody")
    if len(pushes) > MAX_BATCH_PUSHES:
        return 413, _error(f"more than {MAX_BATCH_PUSHES} pushes", "BatchTooLarge")
    marks = received_marks(value["marks"]) if "marks" in value else ()
    if marks is None:
        return 400, _INVALID_MARKS
    batch = _CheckedBatch(pushes)
    if not batch.items:
        return 200, batch.answer()
    return _results(hub, batch, marks)


class _CheckedBatch:
    """A batch's pushes checked: the valid ones as ``(group, record)`` with their positions,
    an answer for each push (202 until the publish says otherwise)."""

    __slots__ = ("answers", "items", "positions")

    def __init__(self, pushes: list[object]) -> None:
        self.answers: list[dict[str, JsonValue]] = [_ACCEPTED] * len(pushes)
        self.items: list[tuple[str, bytes]] = []
        self.positions: list[int] = []
        valid: object = _NONE  # the group of the push before, when it was valid
        for index, push in enumerate(pushes):
            if not isinstance(push, dict):
                self.answers[index] = _NOT_AN_OBJECT
                continue
            group = push.get("group")
            if group != valid:  # a batch's pushes mostly go to one group: checked once
                if not isinstance(group, str) or not is_valid_group(group):
                    self.answers[index] = _INVALID_GROUP
                    continue
                valid = group
            frame = _invocation(push.get("target"), push.get("arguments", []))
            if isinstance(frame, tuple):
                self.answers[index] = {"status": 400, "error": frame[0], "code": frame[1]}
            elif len(frame) > MAX_PUSH_BYTES:
                self.answers[index] = _PUSH_TOO_LARGE
            else:
                self.items.append((group, frame))  # type: ignore[arg-type]  # valid: a str
                self.positions.append(index)

    def answer(self) -> bytes:
        answers = self.answers
        if answers.count(_ACCEPTED) == len(answers):  # the common answer, encoded once
            return _all_accepted(len(answers))
        return orjson.dumps({"results": answers})


_INVALID_MARKS = _error(
    f'"marks" must be an array of at most {MAX_RECEIVED} strings'
    f" of 1 to {MAX_TOKEN_CHARS} characters",
    "InvalidMarks",
)
_NONE = object()
_ACCEPTED: dict[str, JsonValue] = {"status": 202}
_NOT_AN_OBJECT: dict[str, JsonValue] = {
    "status": 400,
    "error": "push must be an object",
    "code": "InvalidBody",
}
_INVALID_GROUP: dict[str, JsonValue] = {
    "status": 400,
    "error": "invalid group name",
    "code": "InvalidGroup",
}
_PUSH_TOO_LARGE: dict[str, JsonValue] = {
    "status": 413,
    "error": "push too large",
    "code": "BodyTooLarge",
}
_ALL_ACCEPTED: dict[int, bytes] = {}


def _all_accepted(count: int) -> bytes:
    """The answer to a batch of ``count`` pushes all accepted, encoded once per count."""
    answer = _ALL_ACCEPTED.get(count)
    if answer is None:
        answer = orjson.dumps({"results": [_ACCEPTED] * count})
        if len(_ALL_ACCEPTED) >= 64:
            _ALL_ACCEPTED.clear()
        _ALL_ACCEPTED[count] = answer
    return answer


async def _results(hub: Hub, batch: _CheckedBatch, marks: tuple[str, ...]) -> Answer:
    """Publish the valid pushes of a batch at once, with the marks it came with (none is ``()``:
    a batch from another process is never the running pass's); the answer, one result per
    push."""
    results = await hub.publish_frames(batch.items, marks)
    failed = None
    for index, result in zip(batch.positions, results, strict=True):
        if result is not None:
            failed = result
            batch.answers[index] = {"status": 503, "error": UNAVAILABLE, "code": "HubUnavailable"}
    if failed is not None:
        log.warning("push_failed", code=failed.code, pushes=len(batch.items))
    return 200, batch.answer()
