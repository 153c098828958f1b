"""The SignalR JSON hub protocol, version 1 (and 2 for stateful reconnect): framing, parsing and
encoding. Pure functions of data; no I/O.

Records are JSON texts each terminated by the record separator ``\\x1e``. One WebSocket frame may
carry several records, and a record may be split across frames, so inbound data goes through a
:class:`RecordBuffer`. Anything malformed raises :class:`ProtocolError`, never another exception.

Message types: 1 Invocation, 2 StreamItem, 3 Completion, 4 StreamInvocation, 5 CancelInvocation,
6 Ping, 7 Close, 8 Ack, 9 Sequence. Unknown integer types are ignored (the protocol reserves them
for later versions); a ``headers`` field is accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeAlias

import orjson

from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.values.json_types import JsonValue

RECORD_SEPARATOR = "\x1e"
_RS_BYTES = b"\x1e"
SUPPORTED_VERSIONS = frozenset({0, 1, 2})
STATEFUL_RECONNECT_MIN_VERSION = 2
JSON_ONLY = frozenset({"json"})


class ProtocolError(RealtimeDispatchError):
    """The peer sent something the protocol does not allow; the connection is closed."""

    code = "Protocol"


class MessageType(IntEnum):
    INVOCATION = 1
    STREAM_ITEM = 2
    COMPLETION = 3
    STREAM_INVOCATION = 4
    CANCEL_INVOCATION = 5
    PING = 6
    CLOSE = 7
    ACK = 8
    SEQUENCE = 9


# Messages that take a sequence id under stateful reconnect (the others are never replayed).
SEQUENCED_TYPES = frozenset(
    {
        MessageType.INVOCATION,
        MessageType.STREAM_ITEM,
        MessageType.COMPLETION,
        MessageType.STREAM_INVOCATION,
        MessageType.CANCEL_INVOCATION,
    }
)


@dataclass(frozen=True, slots=True)
class HandshakeRequest:
    protocol: str
    version: int


@dataclass(slots=True)
class Invocation:
    """Types 1 and 4: the client calls a hub method (``invocation_id`` None = no reply wanted).

    Not frozen: a frozen dataclass's ``__init__`` costs ~0.5 µs more, per invocation (``Typing``
    at its rate); nothing changes one after the parse."""

    type: MessageType
    target: str
    invocation_id: str | None
    arguments: tuple[JsonValue, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    sequence_id: int


@dataclass(frozen=True, slots=True)
class Sequence:
    sequence_id: int


@dataclass(frozen=True, slots=True)
class Close:
    error: str | None


@dataclass(frozen=True, slots=True)
class Other:
    """A valid message the hub has nothing to do for (ping, stream item, completion, cancel)."""

    type: MessageType


ClientMessage: TypeAlias = Invocation | Ack | Sequence | Close | Other


class RecordBuffer:
    """Accumulates inbound text and yields complete records.

    ``max_record_chars`` bounds a single record (and so the partial data kept between frames).
    """

    __slots__ = ("_max", "_partial")

    def __init__(self, max_record_chars: int) -> None:
        self._max = max_record_chars
        self._partial = ""

    def feed(self, data: str) -> list[str]:
        text = self._partial + data if self._partial else data
        records = text.split(RECORD_SEPARATOR)
        rest = records.pop()
        limit = self._max
        if len(text) > limit and (  # only then may one record be too big
            len(rest) > limit or any(len(record) > limit for record in records)
        ):
            self._partial = ""
            raise ProtocolError("message too big", code="MessageTooBig")
        self._partial = rest
        return records

    def clear(self) -> None:
        self._partial = ""

    def holds_partial(self) -> bool:
        """True while the start of a record waits for its rest."""
        return bool(self._partial)


def decode_frame(data: str | bytes) -> str:
    """Text of one inbound WebSocket frame (binary frames must be UTF-8 for the JSON protocol)."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError("frame is not valid UTF-8", code="InvalidUtf8") from exc


def _load_object(record: str) -> dict[str, JsonValue]:
    try:
        value = orjson.loads(record)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("record is not valid JSON", code="InvalidJson") from exc
    if not isinstance(value, dict):
        raise ProtocolError("record is not a JSON object", code="InvalidMessage")
    return value


def parse_handshake(record: str, protocols: frozenset[str] = JSON_ONLY) -> HandshakeRequest:
    """The handshake request (JSON text whatever the protocol it names, one of ``protocols``)."""
    value = _load_object(record)
    protocol = value.get("protocol")
    version = value.get("version")
    if not isinstance(protocol, str):
        raise ProtocolError("handshake has no protocol", code="InvalidHandshake")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProtocolError("handshake has no version", code="InvalidHandshake")
    if protocol not in protocols:
        raise ProtocolError(f"protocol '{protocol[:32]}' is not supported", code="Unsupported")
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(f"protocol version {version} is not supported", code="Unsupported")
    return HandshakeRequest(protocol, version)


def _sequence_id(value: dict[str, JsonValue]) -> int:
    raw = value.get("sequenceId")
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ProtocolError("sequenceId must be a non-negative integer", code="InvalidMessage")
    return raw


def _optional_str(value: dict[str, JsonValue], key: str) -> str | None:
    raw = value.get(key)
    if raw is None or isinstance(raw, str):
        return raw
    raise ProtocolError(f"{key} must be a string", code="InvalidMessage")


def message_type(raw_type: object) -> MessageType | None:
    """A record's message type, in either protocol; ``None`` for an unknown (future) one."""
    if not isinstance(raw_type, int) or isinstance(raw_type, bool):
        raise ProtocolError("message has no integer type", code="InvalidMessage")
    return _MESSAGE_TYPES.get(raw_type)


_MESSAGE_TYPES = {kind.value: kind for kind in MessageType}
"""``MessageType(n)`` costs more than the rest of a small record's parse: a lookup instead."""


def parse_message(record: str) -> ClientMessage | None:
    """One record after the handshake; ``None`` for an unknown (future) message type."""
    value = _load_object(record)
    kind = message_type(value.get("type"))
    if kind is None:
        return None
    match kind:
        case MessageType.INVOCATION | MessageType.STREAM_INVOCATION:
            target = value.get("target")
            if not isinstance(target, str) or not target:
                raise ProtocolError("invocation has no target", code="InvalidMessage")
            arguments = value.get("arguments", [])
            if not isinstance(arguments, list):
                raise ProtocolError("arguments must be an array", code="InvalidMessage")
            return Invocation(kind, target, _optional_str(value, "invocationId"), tuple(arguments))
        case MessageType.ACK:
            return Ack(_sequence_id(value))
        case MessageType.SEQUENCE:
            return Sequence(_sequence_id(value))
        case MessageType.CLOSE:
            return Close(_optional_str(value, "error"))
        case _:  # a stream item, a completion, a cancel or a ping: read, not acted on
            return Other(kind)


def _record(value: dict[str, JsonValue]) -> str:
    return orjson.dumps(value).decode() + RECORD_SEPARATOR


HANDSHAKE_OK = "{}" + RECORD_SEPARATOR
PING = _record({"type": MessageType.PING.value})


def handshake_error(message: str) -> str:
    return _record({"error": message})


def close_message(error: str | None = None, *, allow_reconnect: bool = False) -> str:
    value: dict[str, JsonValue] = {"type": MessageType.CLOSE.value}
    if error is not None:
        value["error"] = error
    if allow_reconnect:
        value["allowReconnect"] = True
    return _record(value)


def completion_error(invocation_id: str, error: str) -> str:
    return _record(
        {"type": MessageType.COMPLETION.value, "invocationId": invocation_id, "error": error}
    )


def completion(invocation_id: str, result: JsonValue = None) -> str:
    """A successful completion: with ``result``, or void when it is None."""
    if result is None:  # the answer of most invocations (Typing): no dict to encode
        return f"{_COMPLETION_HEAD}{orjson.dumps(invocation_id).decode()}}}{RECORD_SEPARATOR}"
    value: dict[str, JsonValue] = {
        "type": MessageType.COMPLETION.value,
        "invocationId": invocation_id,
    }
    if result is not None:
        value["result"] = result
    return _record(value)


_COMPLETION_HEAD = f'{{"type":{MessageType.COMPLETION.value},"invocationId":'


def ack_message(sequence_id: int) -> str:
    return _record({"type": MessageType.ACK.value, "sequenceId": sequence_id})


def sequence_message(sequence_id: int) -> str:
    return _record({"type": MessageType.SEQUENCE.value, "sequenceId": sequence_id})


def push_record(target: str, payload_json: bytes) -> bytes:
    """The invocation record of one push, around its payload's JSON as it comes (the
    dispatcher's projections encode it once): the same bytes as ``invocation_frame(target,
    [payload])``, without decoding and encoding the payload again."""
    return b"".join((_invocation_lead(target), b"[", payload_json, _PUSH_TAIL))


def invocation_frame(target: str, arguments: list[JsonValue]) -> bytes:
    """A server → client invocation record, serialised once for every recipient: the bytes of
    ``{"type":1,"target":target,"arguments":arguments}`` and the separator."""
    return _invocation_lead(target) + orjson.dumps(arguments) + _INVOCATION_TAIL


def _invocation_lead(target: str) -> bytes:
    """``{"type":1,"target":…,"arguments":``, built once per target: a hub has a few."""
    lead = _INVOCATION_LEADS.get(target)
    if lead is None:
        lead = _INVOCATION_HEAD + orjson.dumps(target) + b',"arguments":'
        if len(_INVOCATION_LEADS) >= _MAX_INVOCATION_LEADS:
            _INVOCATION_LEADS.clear()
        _INVOCATION_LEADS[target] = lead
    return lead


_INVOCATION_HEAD = b'{"type":%d,"target":' % MessageType.INVOCATION.value
_PUSH_TAIL = b"]}" + _RS_BYTES
_INVOCATION_LEADS: dict[str, bytes] = {}
_MAX_INVOCATION_LEADS = 256
_INVOCATION_TAIL = b"}" + _RS_BYTES
