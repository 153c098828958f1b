"""The SignalR MessagePack hub protocol: framing, parsing and encoding. Pure functions of data.

A record is a MessagePack array prefixed by its length as a varint (7 bits a byte, low bits
first, at most 5 bytes). The handshake stays JSON text (see :mod:`.protocol`); after it, every
record is binary, so this protocol needs a transport with the ``Binary`` transfer format
(WebSockets binary frames, long polling), never Server-Sent Events.

Messages are arrays whose first element is the type: ``[1, headers, invocationId, target,
arguments, streamIds]`` (the hub writes the stream ids, an empty array, as ASP.NET Core 3.0
and later do: clients such as signalrcore read six elements; it reads five or six; ``4`` a
StreamInvocation alike), ``[3, headers, invocationId, resultKind(, result)]``, ``[6]``,
``[7, error, allowReconnect]``, ``[8, sequenceId]``, ``[9, sequenceId]``. Inbound messages
become the same :data:`~.protocol.ClientMessage` values as the JSON protocol's; anything
malformed raises :class:`~.protocol.ProtocolError`.

The hub's pushes arrive as JSON invocation records (the dispatcher encodes payloads as JSON
once); :func:`records_from_json` re-encodes them for MessagePack members, once per push.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Any

import orjson
import ormsgpack

from realtime_dispatch.hub.wire.protocol import (
    Ack,
    ClientMessage,
    Close,
    Invocation,
    MessageType,
    Other,
    ProtocolError,
    Sequence,
    message_type,
)

MAX_VARINT_BYTES = 5
_ERROR_RESULT = 1
_VOID_RESULT = 2
_NON_VOID_RESULT = 3
_loads = orjson.loads
_packb = ormsgpack.packb
_NO_HEADERS: dict[str, str] = {}  # packed, never changed
_SHORT_PREFIX = [bytes((size,)) for size in range(0x80)]
"""The length prefixes of one byte: records under 128 bytes."""


def length_prefixed(body: bytes) -> bytes:
    """``body`` with its varint length prefix."""
    size = len(body)
    return (_SHORT_PREFIX[size] if size < 0x80 else _prefix(size)) + body


def _prefix(size: int) -> bytes:
    """The varint of ``size`` (the length prefix of a record of that many bytes)."""
    if size < 0x4000:  # two bytes: most records
        return bytes(((size & 0x7F) | 0x80, size >> 7))
    prefix = bytearray()
    while size >= 0x80:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix)


def _pack(value: list[Any]) -> bytes:
    return length_prefixed(ormsgpack.packb(value))


class BinaryRecordBuffer:
    """Accumulates inbound bytes and yields complete records (without their prefix).

    ``max_record_bytes`` bounds a single record, and so the partial data kept between frames.
    """

    __slots__ = ("_max", "_partial")

    def __init__(self, max_record_bytes: int) -> None:
        self._max = max_record_bytes
        self._partial = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._partial + data if self._partial else data
        records: list[bytes] = []
        offset, end = 0, len(buffer)
        while offset < end:
            size = shift = 0
            index = offset
            complete = False
            while index < end:
                byte = buffer[index]
                index += 1
                size |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    complete = True
                    break
                shift += 7
                if index - offset >= MAX_VARINT_BYTES:
                    self._partial = b""
                    raise ProtocolError("invalid record length", code="InvalidMessage")
            if not complete:
                break  # the prefix itself is incomplete
            if size > self._max:
                self._partial = b""
                raise ProtocolError("message too big", code="MessageTooBig")
            if index + size > end:
                break
            records.append(buffer[index : index + size])
            offset = index + size
        self._partial = buffer[offset:]
        if len(self._partial) > self._max + MAX_VARINT_BYTES:
            self._partial = b""
            raise ProtocolError("message too big", code="MessageTooBig")
        return records

    def clear(self) -> None:
        self._partial = b""

    def holds_partial(self) -> bool:
        """True while the start of a record waits for its rest."""
        return bool(self._partial)


def _int_at(value: list[Any], index: int, what: str) -> int:
    raw = value[index] if len(value) > index else None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ProtocolError(f"{what} must be a non-negative integer", code="InvalidMessage")
    return raw


def _str_or_none(value: list[Any], index: int, what: str) -> str | None:
    raw = value[index] if len(value) > index else None
    if raw is None or isinstance(raw, str):
        return raw
    raise ProtocolError(f"{what} must be a string", code="InvalidMessage")


def parse_message(record: bytes) -> ClientMessage | None:
    """One record after the handshake; ``None`` for an unknown (future) message type."""
    try:
        value = ormsgpack.unpackb(record)
    except (ValueError, TypeError) as exc:  # ormsgpack.MsgpackDecodeError is a ValueError
        raise ProtocolError("record is not valid MessagePack", code="InvalidMessage") from exc
    if not isinstance(value, list) or not value:
        raise ProtocolError("record is not a MessagePack array", code="InvalidMessage")
    kind = message_type(value[0])
    if kind is None:
        return None
    match kind:
        case MessageType.INVOCATION | MessageType.STREAM_INVOCATION:
            if len(value) < 5:
                raise ProtocolError("invocation is too short", code="InvalidMessage")
            target = value[3]
            if not isinstance(target, str) or not target:
                raise ProtocolError("invocation has no target", code="InvalidMessage")
            if not isinstance(value[4], list):
                raise ProtocolError("arguments must be an array", code="InvalidMessage")
            return Invocation(kind, target, _str_or_none(value, 2, "invocationId"), tuple(value[4]))
        case MessageType.ACK:
            return Ack(_int_at(value, 1, "sequenceId"))
        case MessageType.SEQUENCE:
            return Sequence(_int_at(value, 1, "sequenceId"))
        case MessageType.CLOSE:
            return Close(_str_or_none(value, 1, "error"))
        case _:  # a stream item, a completion, a cancel or a ping: read, not acted on
            return Other(kind)


PING = _pack([MessageType.PING.value])


def close_message(error: str | None = None, *, allow_reconnect: bool = False) -> bytes:
    return _pack([MessageType.CLOSE.value, error, allow_reconnect])


def completion_error(invocation_id: str, error: str) -> bytes:
    return _pack([MessageType.COMPLETION.value, {}, invocation_id, _ERROR_RESULT, error])


def completion(invocation_id: str, result: Any = None) -> bytes:
    """A successful completion: result kind 3 with ``result``, or 2 (void) when it is None."""
    if result is None:
        return _pack([MessageType.COMPLETION.value, {}, invocation_id, _VOID_RESULT])
    return _pack([MessageType.COMPLETION.value, {}, invocation_id, _NON_VOID_RESULT, result])


def ack_message(sequence_id: int) -> bytes:
    return _pack([MessageType.ACK.value, sequence_id])


def sequence_message(sequence_id: int) -> bytes:
    return _pack([MessageType.SEQUENCE.value, sequence_id])


_NO_STREAMS: list[str] = []  # packed, never changed


def invocation(target: str, arguments: list[Any]) -> bytes:
    return _pack([MessageType.INVOCATION.value, {}, None, target, arguments, _NO_STREAMS])


def record_from_json(record: bytes) -> bytes:
    """The MessagePack record of one JSON record the hub sends (a push's invocation, or a
    ping, close, completion, ack or sequence), for a MessagePack member."""
    try:
        value = orjson.loads(record[:-1] if record[-1:] == b"\x1e" else record)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("record is not valid JSON", code="InvalidJson") from exc
    if not isinstance(value, dict):
        raise ProtocolError("record is not a JSON object", code="InvalidMessage")
    try:
        return _from_json_value(value)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError("record has no MessagePack equivalent", code="Unsupported") from exc


_INVOCATION = MessageType.INVOCATION.value  # plain ints: an enum's .value costs a lookup each
_COMPLETION = MessageType.COMPLETION.value
_PING = MessageType.PING.value
_CLOSE = MessageType.CLOSE.value
_ACK = MessageType.ACK.value
_SEQUENCE = MessageType.SEQUENCE.value


def _from_json_value(value: dict[str, Any]) -> bytes:
    kind = value.get("type")
    if kind == _INVOCATION:
        return length_prefixed(
            _packb(
                [
                    _INVOCATION,
                    _NO_HEADERS,
                    None,
                    value["target"],
                    value.get("arguments", []),
                    _NO_STREAMS,
                ]
            )
        )
    if kind == _PING:
        return PING
    if kind == _CLOSE:
        return close_message(value.get("error"), allow_reconnect=bool(value.get("allowReconnect")))
    if kind == _COMPLETION and "error" in value:
        return completion_error(value["invocationId"], value["error"])
    if kind == _ACK:
        return ack_message(value["sequenceId"])
    if kind == _SEQUENCE:
        return sequence_message(value["sequenceId"])
    raise ValueError("no MessagePack equivalent")


def records_from_json(records: Seq[bytes]) -> list[bytes]:
    """:func:`record_from_json` of each record, in order. A push's invocation record, as the hub
    builds it (``{"type":1,"target":…,"arguments":[…]}`` and its separator, see
    :func:`~.protocol.push_record`), is read in one piece: only its arguments are decoded, and
    the MessagePack record packed at once; any other record goes through
    :func:`record_from_json`. The bytes are the same either way."""
    encoded: list[bytes] = []
    lead, target, start = b"", "", 0
    for record in records:
        if not (lead and record.startswith(lead)):  # a run's records share their lead
            found = _push_lead(record)
            if found is None:
                encoded.append(record_from_json(record))
                continue
            lead, target = found
            start = len(lead)
        if record[-3:] != _PUSH_END:
            encoded.append(record_from_json(record))
            continue
        try:
            arguments = _loads(record[start:-2])
        except orjson.JSONDecodeError:
            encoded.append(record_from_json(record))  # raises the ProtocolError
            continue
        encoded.append(
            length_prefixed(
                _packb([_INVOCATION, _NO_HEADERS, None, target, arguments, _NO_STREAMS])
            )
        )
    return encoded


_PUSH_START = b'{"type":%d,"target":"' % _INVOCATION
_PUSH_ARGUMENTS = b'","arguments":'
_PUSH_END = b"]}\x1e"
_PUSH_LEADS: dict[bytes, str] = {}
"""``{"type":1,"target":"…","arguments":`` by the bytes of it, and its target: a hub has a few
targets."""
_MAX_PUSH_LEADS = 256


def _push_lead(record: bytes) -> tuple[bytes, str] | None:
    """The lead of a push's invocation record (up to its arguments) and its target; None for
    a record of another shape. A lead is checked once, by decoding it as JSON, then kept."""
    if not record.startswith(_PUSH_START):
        return None
    end = record.find(b'"', len(_PUSH_START))
    if end < 0 or not record.startswith(_PUSH_ARGUMENTS, end):
        return None
    lead = record[: end + len(_PUSH_ARGUMENTS)]
    target = _PUSH_LEADS.get(lead)
    if target is None:
        try:
            value = _loads(lead + b"[]}")
        except orjson.JSONDecodeError:
            return None
        target = value.get("target") if len(value) == 3 else None
        if not isinstance(target, str) or value.get("type") != _INVOCATION:
            return None
        if len(_PUSH_LEADS) >= _MAX_PUSH_LEADS:
            _PUSH_LEADS.clear()
        _PUSH_LEADS[lead] = target
    return lead, target
