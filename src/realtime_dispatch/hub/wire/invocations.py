"""The hub's most frequent inbound record, a ``Typing`` invocation, read without the general
parse, and the void completion that answers it, in both protocols. Pure.

:func:`typing_json` and :func:`typing_messagepack` take what a client sent in one piece (a
WebSocket message, an HTTP body) and return the :class:`~.protocol.Invocation` that
:func:`.protocol.parse_message` / :func:`.messagepack.parse_message` would, when that piece is
exactly one whole ``Typing`` invocation record (type 1) within the record limit; None for
anything else (another target or type, several records, a partial one, a malformed one, a field
of the wrong type), which the general path then reads and answers as it always did. They never
raise.
"""

from __future__ import annotations

import orjson
import ormsgpack

from realtime_dispatch.hub.wire.messagepack import length_prefixed
from realtime_dispatch.hub.wire.protocol import Invocation, MessageType

TYPING = "Typing"
_RS_BYTES = b"\x1e"
_LAST = frozenset({0x1E, "\x1e"})
"""The last item of a whole record, in bytes (an int) or in text (a character)."""
_INVOCATION = MessageType.INVOCATION
_JSON_COMPLETION = b'{"type":3,"invocationId":'
_MSGPACK_COMPLETION = b"\x94\x03\x80"  # fixarray of 4: type 3, headers {}, id, result kind
_VOID_RESULT = b"\x02"


def typing_json(data: str | bytes, max_chars: int) -> Invocation | None:
    """The ``Typing`` invocation that ``data`` is, whole: one JSON record and its ``\\x1e``."""
    size = len(data)
    if not size or size - 1 > max_chars or data[-1] not in _LAST:
        return None
    try:  # an \x1e before the last is in no valid JSON text: another record fails here
        value = orjson.loads(data[:-1])
    except ValueError:  # orjson.JSONDecodeError, invalid UTF-8 too: the general path says which
        return None
    if value.__class__ is not dict or value.get("target") != TYPING:
        return None
    kind = value.get("type")
    if kind.__class__ is not int or kind != 1:
        return None
    arguments = value.get("arguments", [])
    invocation_id = value.get("invocationId")
    if arguments.__class__ is not list or not (
        invocation_id is None or invocation_id.__class__ is str
    ):
        return None
    return Invocation(_INVOCATION, TYPING, invocation_id, tuple(arguments))


def typing_messagepack(data: bytes, max_bytes: int) -> Invocation | None:
    """The ``Typing`` invocation that ``data`` is, whole: one record and its length prefix of
    one byte (a record under 128 bytes, as ``Typing``'s are)."""
    if not data:
        return None
    size = data[0]
    if size >= 0x80 or len(data) != size + 1 or size > max_bytes:
        return None
    try:
        value = ormsgpack.unpackb(data[1:])
    except (ValueError, TypeError):
        return None
    if value.__class__ is not list or len(value) < 5 or value[3] != TYPING:
        return None
    kind, invocation_id, arguments = value[0], value[2], value[4]
    if kind.__class__ is not int or kind != 1 or arguments.__class__ is not list:
        return None
    if not (invocation_id is None or invocation_id.__class__ is str):
        return None
    return Invocation(_INVOCATION, TYPING, invocation_id, tuple(arguments))


def void_completion_json(invocation_id: str) -> bytes:
    """``completion(invocation_id)`` of the JSON protocol, as bytes: the record put together
    around the id, no dict encoded."""
    return b"".join((_JSON_COMPLETION, orjson.dumps(invocation_id), b"}", _RS_BYTES))


def void_completion_messagepack(invocation_id: str) -> bytes:
    """``completion(invocation_id)`` of the MessagePack protocol: ``[3, {}, id, 2]``."""
    return length_prefixed(
        b"".join((_MSGPACK_COMPLETION, ormsgpack.packb(invocation_id), _VOID_RESULT))
    )
