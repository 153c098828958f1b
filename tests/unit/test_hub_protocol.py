"""JSON hub protocol framing and parsing, and the inbound session state machine (fuzzed)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.hub.connections.session import CloseReason, InboundSession
from realtime_dispatch.hub.wire.protocol import (
    RECORD_SEPARATOR as RS,
)
from realtime_dispatch.hub.wire.protocol import (
    Ack,
    Close,
    Invocation,
    MessageType,
    Other,
    ProtocolError,
    RecordBuffer,
    Sequence,
    close_message,
    invocation_frame,
    parse_handshake,
    parse_message,
    push_record,
)

HANDSHAKE = '{"protocol":"json","version":1}' + RS


def test_record_buffer_joins_split_records_and_splits_joined_ones():
    buffer = RecordBuffer(100)
    assert buffer.feed('{"a":') == []
    assert buffer.feed("1}" + RS + '{"b":2}' + RS + '{"c"') == ['{"a":1}', '{"b":2}']
    assert buffer.feed(":3}" + RS) == ['{"c":3}']


def test_record_buffer_bounds_a_record():
    buffer = RecordBuffer(10)
    with pytest.raises(ProtocolError):
        buffer.feed("x" * 11)
    with pytest.raises(ProtocolError):
        RecordBuffer(10).feed("x" * 11 + RS)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_handshake_versions(version):
    assert parse_handshake(f'{{"protocol":"json","version":{version}}}').version == version


@pytest.mark.parametrize(
    "record",
    [
        '{"protocol":"messagepack","version":1}',
        '{"protocol":"json","version":3}',
        '{"protocol":"json"}',
        '{"protocol":"json","version":true}',
        "[]",
        "nope",
    ],
)
def test_bad_handshakes(record):
    with pytest.raises(ProtocolError):
        parse_handshake(record)


def test_parse_messages():
    assert parse_message(
        '{"type":1,"invocationId":"7","target":"Send","arguments":[1],"headers":{"x":"y"}}'
    ) == Invocation(MessageType.INVOCATION, "Send", "7", (1,))
    assert parse_message('{"type":6}') == Other(MessageType.PING)
    assert parse_message('{"type":8,"sequenceId":3}') == Ack(3)
    assert parse_message('{"type":9,"sequenceId":1}') == Sequence(1)
    assert parse_message('{"type":7,"error":"bye"}') == Close("bye")
    assert parse_message('{"type":99}') is None  # future message types are ignored
    bad_records = [
        '{"type":"1"}',
        '{"type":1}',
        '{"type":8}',
        '{"type":1,"target":"x","arguments":3}',
    ]
    for bad in bad_records:
        with pytest.raises(ProtocolError):
            parse_message(bad)


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=30),
    st.lists(
        st.recursive(st.none() | st.integers(-(2**63), 2**63) | st.text(), st.lists, max_leaves=20)
    ),
)
def test_invocation_frame_is_its_dict_encoded(target: str, arguments: list[object]) -> None:
    expected = orjson.dumps({"type": 1, "target": target, "arguments": arguments}) + b"\x1e"
    assert invocation_frame(target, arguments) == expected  # type: ignore[arg-type]
    assert invocation_frame(target, arguments) == expected  # type: ignore[arg-type]  # kept lead


def test_encoders():
    assert orjson.loads(invocation_frame("t", [{"a": 1}])[:-1]) == {
        "type": 1,
        "target": "t",
        "arguments": [{"a": 1}],
    }
    assert close_message("e", allow_reconnect=True) == (
        '{"type":7,"error":"e","allowReconnect":true}' + RS
    )


def test_session_unknown_method_completion_and_non_blocking_call():
    session = InboundSession(max_record_chars=1000, stateful_allowed=False)
    inbound = session.feed(
        HANDSHAKE + '{"type":1,"invocationId":"1","target":"X","arguments":[]}' + RS
    )
    assert inbound.handshake is not None
    assert inbound.replies == [
        b'{"type":3,"invocationId":"1","error":"Unknown hub method \'X\'."}\x1e'
    ]
    assert session.feed('{"type":1,"target":"X","arguments":[]}' + RS).replies == []


def test_session_stateful_numbering_dedupe_and_ack():
    session = InboundSession(max_record_chars=1000, stateful_allowed=True)
    session.feed('{"protocol":"json","version":2}' + RS)
    assert session.stateful
    call = '{"type":1,"invocationId":"%s","target":"X","arguments":[]}' + RS
    first = session.feed(call % "a" + call % "b")
    assert len(first.replies) == 2
    assert first.ack_to_send == 2
    # After a reconnect the client announces its first resent message (1) and resends.
    session.new_transport()
    again = session.feed('{"type":9,"sequenceId":1}' + RS + call % "a" + call % "b" + call % "c")
    assert [r.count(b'"c"') for r in again.replies] == [1]
    assert again.ack_to_send == 3
    ahead = session.feed('{"type":9,"sequenceId":10}' + RS)
    assert ahead.close is not None
    assert ahead.close.reason is CloseReason.PROTOCOL_ERROR


def test_session_version_1_is_not_stateful():
    session = InboundSession(max_record_chars=1000, stateful_allowed=True)
    session.feed(HANDSHAKE)
    assert not session.stateful


def test_session_client_close():
    session = InboundSession(max_record_chars=1000, stateful_allowed=False)
    inbound = session.feed(HANDSHAKE + '{"type":7}' + RS)
    assert inbound.close is not None
    assert inbound.close.reason is CloseReason.CLIENT_CLOSE


@settings(max_examples=300, deadline=None)
@given(
    before=st.booleans(),
    frames=st.lists(st.one_of(st.binary(max_size=300), st.text(max_size=300)), max_size=6),
)
def test_fuzz_arbitrary_input_never_raises(before, frames):
    """Arbitrary bytes/text, before or after a valid handshake: the session either goes on or
    asks to close with an error message; it never raises."""
    session = InboundSession(max_record_chars=256, stateful_allowed=True)
    if before:
        session.feed('{"protocol":"json","version":2}' + RS)
    for frame in frames:
        inbound = session.feed(frame)
        if inbound.close is not None:
            assert inbound.close.reason is CloseReason.CLIENT_CLOSE or inbound.close.error
            break


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["type", "target", "invocationId", "sequenceId", "arguments", "error", "headers"]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(json_values, max_size=8))
def test_fuzz_structured_records_never_raise(records):
    session = InboundSession(max_record_chars=4096, stateful_allowed=True)
    session.feed('{"protocol":"json","version":2}' + RS)
    text = "".join(json.dumps(r) + RS for r in records)
    inbound = session.feed(text)
    assert inbound.close is None or inbound.close.reason in {
        CloseReason.PROTOCOL_ERROR,
        CloseReason.CLIENT_CLOSE,
    }


@pytest.mark.parametrize(
    "payload",
    [
        {"chatId": "c", "seq": 1, "body": 'héllo ✓ \u2028 "quoted"', "nested": {"a": [1, None]}},
        {},
    ],
)
def test_a_push_record_from_payload_json_is_the_invocation_frame(
    payload: dict[str, object],
) -> None:
    push = Push("chat:c", "message_received", payload)
    assert push_record(push.target, push.payload_json) == invocation_frame(
        push.target, [push.payload]
    )
    rebuilt = Push("chat:c", "message_received", payload_json=push.payload_json)
    assert push_record(rebuilt.target, rebuilt.payload_json) == push_record(
        push.target, push.payload_json
    )
