"""The MessagePack hub protocol (framing, parsing, encoding), a session speaking it, and the
Server-Sent Events framing: pure, no I/O."""

from __future__ import annotations

import orjson
import ormsgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realtime_dispatch.hub.connections.session import CloseReason, InboundSession
from realtime_dispatch.hub.transports.sse import sse_event
from realtime_dispatch.hub.wire.messagepack import (
    BinaryRecordBuffer,
    close_message,
    length_prefixed,
    parse_message,
    record_from_json,
    records_from_json,
)
from realtime_dispatch.hub.wire.protocol import (
    Ack,
    Close,
    Invocation,
    MessageType,
    Other,
    ProtocolError,
    Sequence,
    invocation_frame,
    push_record,
)
from realtime_dispatch.hub.wire.protocol import (
    close_message as json_close,
)
from realtime_dispatch.hub.wire.protocols import MESSAGEPACK

MSGPACK_HANDSHAKE = b'{"protocol":"messagepack","version":1}\x1e'


def _record(value: object) -> bytes:
    return length_prefixed(ormsgpack.packb(value))


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 2_097_152])
def test_length_prefix_round_trips_whole_and_byte_by_byte(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    data = length_prefixed(body) + length_prefixed(b"next")
    prefix = len(data) - len(body) - 5
    assert prefix == (1 if size < 128 else 2 if size < 16_384 else 3 if size < 2_097_152 else 4)
    assert BinaryRecordBuffer(size + 10).feed(data) == [body, b"next"]
    if size <= 16_384:
        buffer = BinaryRecordBuffer(size + 10)
        records = [record for i in range(len(data)) for record in buffer.feed(data[i : i + 1])]
        assert records == [body, b"next"]


def test_record_buffer_bounds_a_record_and_its_prefix() -> None:
    with pytest.raises(ProtocolError) as error:
        BinaryRecordBuffer(10).feed(length_prefixed(b"x" * 11))
    assert error.value.code == "MessageTooBig"
    with pytest.raises(ProtocolError):
        BinaryRecordBuffer(10).feed(b"\xff" * 6)  # a varint longer than 5 bytes


def test_parse_messages() -> None:
    assert parse_message(ormsgpack.packb([1, {"h": "v"}, "7", "Send", [1], []])) == Invocation(
        MessageType.INVOCATION, "Send", "7", (1,)
    )
    assert parse_message(ormsgpack.packb([1, {}, None, "Send", []])) == Invocation(
        MessageType.INVOCATION, "Send", None
    )
    assert parse_message(ormsgpack.packb([4, {}, "8", "Stream", [1], ["s1"]])) == Invocation(
        MessageType.STREAM_INVOCATION, "Stream", "8", (1,)
    )
    assert parse_message(ormsgpack.packb([6])) == Other(MessageType.PING)
    assert parse_message(ormsgpack.packb([8, 3])) == Ack(3)
    assert parse_message(ormsgpack.packb([9, 1])) == Sequence(1)
    assert parse_message(ormsgpack.packb([7, "bye"])) == Close("bye")
    assert parse_message(ormsgpack.packb([7, None, True])) == Close(None)
    assert parse_message(ormsgpack.packb([99])) is None  # future message types are ignored
    for bad in ([], [1, {}, None], [1, {}, None, "", []], [1, {}, None, "t", 3], [8], ["1"], {}):
        with pytest.raises(ProtocolError):
            parse_message(ormsgpack.packb(bad))
    for garbage in (b"", b"\xc1", b"\x92\x01"):
        with pytest.raises(ProtocolError):
            parse_message(garbage)


def test_json_records_re_encoded() -> None:
    record = invocation_frame("t", [{"a": 1, "b": [1.5, None, True, "é"]}])
    assert ormsgpack.unpackb(record_from_json(record)[1:]) == [
        1,
        {},
        None,
        "t",
        [{"a": 1, "b": [1.5, None, True, "é"]}],
        [],  # the stream ids: six elements, as ASP.NET Core writes an Invocation
    ]
    close = record_from_json(json_close("e", allow_reconnect=True).encode())
    assert close == close_message("e", allow_reconnect=True)
    assert ormsgpack.unpackb(close[1:]) == [7, "e", True]
    with pytest.raises(ProtocolError):
        record_from_json(b'{"type":4}\x1e')
    with pytest.raises(ProtocolError):
        record_from_json(b"not json\x1e")


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _invocation_record(target: str, arguments: list[object]) -> bytes:
    """An Invocation for a MessagePack member, built in pieces: ``[1, {}, None`` and the
    target, the arguments packed, and the empty stream ids (six elements)."""
    head = b"\x96\x01\x80\xc0" + ormsgpack.packb(target)
    return length_prefixed(head + ormsgpack.packb(arguments) + b"\x90")


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40), st.lists(_JSON_VALUES, max_size=3))
def test_push_records_re_encoded_in_one_piece_as_before(
    target: str, arguments: list[object]
) -> None:
    try:
        payload_json = orjson.dumps(arguments[0]) if arguments else b"null"
    except orjson.JSONEncodeError:  # a key or value orjson does not take: no such push
        return
    pushed = orjson.loads(payload_json)
    records = [
        push_record(target, payload_json),
        invocation_frame(target, arguments),
        push_record(target, payload_json),  # the same lead again: kept from the first
    ]
    expected = [
        _invocation_record(target, [pushed]),
        _invocation_record(target, arguments),
        _invocation_record(target, [pushed]),
    ]
    assert records_from_json(records) == expected
    assert [record_from_json(record) for record in records] == expected


def test_records_not_of_a_push_shape_are_re_encoded_as_any_record() -> None:
    records = [
        b'{"type":1,"target":"t","arguments":[1],"x":[2]}\x1e',  # a key after the arguments
        b'{"type":1,"target":"t","arguments":[[1]]}',  # no separator
        b'{"type":1,"target":"a\\"b","arguments":[2]}\x1e',  # an escape in the target
        b'{"type":1,"target":"t\\u0041","arguments":[3]}\x1e',
        b'{"type":1,"target":"t","arguments":[4]}\x1e',
        b'{"type":6}\x1e',
        json_close("e", allow_reconnect=True).encode(),
        b'{"type":1, "target":"t","arguments":[5]}\x1e',  # another spacing
    ]
    encoded = records_from_json(records)
    assert encoded == [record_from_json(record) for record in records]
    assert [ormsgpack.unpackb(record[1:]) for record in encoded[:5]] == [
        [1, {}, None, "t", [1], []],
        [1, {}, None, "t", [[1]], []],
        [1, {}, None, 'a"b', [2], []],
        [1, {}, None, "tA", [3], []],
        [1, {}, None, "t", [4], []],
    ]
    for broken in (
        b'{"type":1,"target":"t","arguments":[1],[2]}\x1e',
        b'{"type":1,"target":"t","arguments":[1]]}\x1e',
        b'{"type":1,"target":"t\x01","arguments":[1]}\x1e',  # a raw control character
    ):
        with pytest.raises(ProtocolError):
            records_from_json([records[4], broken])


def test_session_speaks_the_protocol_its_handshake_named() -> None:
    session = InboundSession(max_record_chars=1000, stateful_allowed=False)
    call = _record([1, {}, "1", "X", []])
    inbound = session.feed(MSGPACK_HANDSHAKE + call[:3])  # handshake, then a partial record
    assert inbound.handshake is not None
    assert session.protocol is MESSAGEPACK
    assert inbound.replies == []
    inbound = session.feed(call[3:] + _record([6]))
    assert [ormsgpack.unpackb(r[1:]) for r in inbound.replies] == [
        [3, {}, "1", 1, "Unknown hub method 'X'."]
    ]
    closed = session.feed(_record([7, None]))
    assert closed.close is not None
    assert closed.close.reason is CloseReason.CLIENT_CLOSE
    broken = InboundSession(max_record_chars=1000, stateful_allowed=False)
    broken.feed(MSGPACK_HANDSHAKE)
    failed = broken.feed(_record("not an array"))
    assert failed.close is not None
    assert failed.close.reason is CloseReason.PROTOCOL_ERROR


def test_binary_protocol_refused_on_a_text_transport() -> None:
    session = InboundSession(max_record_chars=1000, stateful_allowed=False, binary_allowed=False)
    inbound = session.feed(MSGPACK_HANDSHAKE)
    assert inbound.handshake is None
    assert inbound.handshake_reply_error is not None
    assert "'Binary' transfer format" in inbound.handshake_reply_error


def test_sse_event_has_a_data_line_per_line() -> None:
    assert sse_event(b'{"a":1}\x1e') == b'data: {"a":1}\x1e\r\n\r\n'
    assert sse_event(b"one\ntwo\r\nthree") == b"data: one\r\ndata: two\r\ndata: three\r\n\r\n"


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=6))
def test_session_never_raises_on_arbitrary_bytes_after_a_messagepack_handshake(
    chunks: list[bytes],
) -> None:
    session = InboundSession(max_record_chars=100, stateful_allowed=True)
    session.feed(b'{"protocol":"messagepack","version":2}\x1e')
    for chunk in chunks:
        inbound = session.feed(chunk)
        if inbound.close is not None:
            break
