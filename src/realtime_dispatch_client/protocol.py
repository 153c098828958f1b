"""The client side of the SignalR JSON hub protocol (version 1): what the SDK sends and how it
reads what the hub sends. Pure functions of data; no I/O.

Records are JSON texts terminated by ``\\x1e``; a WebSocket frame may hold several records and a
record may span frames (:class:`RecordSplitter`). The first record from the server answers the
handshake (``{}`` or ``{"error": …}``); after it come invocations (type 1: an event), pings
(6) and a close message (7, with ``allowReconnect`` when the server is only going away).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import orjson

from realtime_dispatch_client.exceptions import HubProtocolError

RECORD_SEPARATOR = "\x1e"
HANDSHAKE = '{"protocol":"json","version":1}' + RECORD_SEPARATOR
PING = '{"type":6}' + RECORD_SEPARATOR
CLOSE = '{"type":7}' + RECORD_SEPARATOR

_INVOCATION, _COMPLETION, _PING, _CLOSE = 1, 3, 6, 7


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An invocation from the server: ``target`` is the event name (``message_received``)."""

    target: str
    arguments: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CloseRecord:
    error: str | None
    allow_reconnect: bool


@dataclass(frozen=True, slots=True)
class CompletionRecord:
    """The hub's answer to one of the client's invocations: a result, or an error."""

    invocation_id: str
    result: Any
    error: str | None


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A ping, a completion or a future message type: nothing to do."""

    type: int


ServerRecord: TypeAlias = EventRecord | CloseRecord | CompletionRecord | OtherRecord


def invocation_record(invocation_id: str, target: str, arguments: list[Any]) -> str:
    """A client invocation of a hub method (``Typing``, ``WatchPresence``)."""
    record = {
        "type": _INVOCATION,
        "invocationId": invocation_id,
        "target": target,
        "arguments": arguments,
    }
    return orjson.dumps(record).decode() + RECORD_SEPARATOR


class RecordSplitter:
    """Feeds frames in, gets complete records out (partial records are kept between frames)."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = ""

    def feed(self, frame: str | bytes) -> list[str]:
        text = frame.decode("utf-8") if isinstance(frame, bytes) else frame
        *records, self._partial = (self._partial + text).split(RECORD_SEPARATOR)
        return [r for r in records if r]


def _object(record: str) -> dict[str, Any]:
    try:
        value = orjson.loads(record)
    except orjson.JSONDecodeError as exc:
        raise HubProtocolError("record is not valid JSON") from exc
    if not isinstance(value, dict):
        raise HubProtocolError("record is not a JSON object")
    return value


def parse_handshake_response(record: str) -> None:
    """Accept ``{}``; raise :class:`HubProtocolError` for ``{"error": …}``."""
    error = _object(record).get("error")
    if error is not None:
        raise HubProtocolError(f"handshake refused: {error}")


def parse_server_record(record: str) -> ServerRecord:
    value = _object(record)
    kind = value.get("type")
    if not isinstance(kind, int) or isinstance(kind, bool):
        raise HubProtocolError("record has no integer type")
    if kind == _INVOCATION:
        target, arguments = value.get("target"), value.get("arguments", [])
        if not isinstance(target, str) or not isinstance(arguments, list):
            raise HubProtocolError("invocation without target or arguments")
        return EventRecord(target, tuple(arguments))
    if kind == _CLOSE:
        error = value.get("error")
        return CloseRecord(
            error if isinstance(error, str) else None, value.get("allowReconnect") is True
        )
    if kind == _COMPLETION:
        invocation_id, error = value.get("invocationId"), value.get("error")
        if not isinstance(invocation_id, str):
            raise HubProtocolError("completion without an invocation id")
        return CompletionRecord(
            invocation_id, value.get("result"), error if isinstance(error, str) else None
        )
    return OtherRecord(kind)


def reconnect_delay(attempt: int, *, base: float, cap: float, jitter: float) -> float:
    """Seconds to wait before reconnect attempt ``attempt`` (1, 2, …): ``base · 2^(n-1)``,
    capped, times ``1 - jitter`` (``jitter`` in [0, 1) is drawn by the caller, so this stays a
    plain function). Drawn uniformly from [0, 1), that is "full jitter": the clients of one
    replica that fell together spread over the whole window instead of returning in
    lock-step. The first attempt after a drop may be immediate when ``base`` is 0."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    delay = min(cap, base * 2.0 ** min(attempt - 1, 32))
    return delay * (1.0 - jitter)
