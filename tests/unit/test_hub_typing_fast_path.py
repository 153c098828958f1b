"""The session's fast path for a lone ``Typing`` record (:mod:`realtime_dispatch.hub.wire.
invocations`): it answers exactly what the general parse answers, for the records it takes and
for the malformed ones it leaves to the general path; the void completions it goes with; and a
completion written straight to the transport when nothing is queued."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import orjson
import ormsgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub.connections import session as session_module
from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import Inbound, InboundSession
from realtime_dispatch.hub.wire import messagepack, protocol
from realtime_dispatch.hub.wire.framing import RawSink, binary_frame, text_frame
from realtime_dispatch.hub.wire.invocations import (
    typing_json,
    typing_messagepack,
    void_completion_json,
    void_completion_messagepack,
)
from realtime_dispatch.hub.wire.messagepack import length_prefixed
from realtime_dispatch.hub.wire.protocol import Invocation, MessageType

RS = b"\x1e"
CHAT = "0b5c2c4e-43f6-4c55-9a4b-51a6b2f0a1de"
JSON_HANDSHAKE = b'{"protocol":"json","version":1}\x1e'
STATEFUL_HANDSHAKE = b'{"protocol":"json","version":2}\x1e'
MSGPACK_HANDSHAKE = b'{"protocol":"messagepack","version":1}\x1e'

TAKEN_JSON = [
    b'{"type":1,"invocationId":"7","target":"Typing","arguments":["%s"]}' % CHAT.encode(),
    # the official JS client's order, and without an id (``send``)
    b'{"arguments":["%s"],"invocationId":"0","target":"Typing","type":1}' % CHAT.encode(),
    b'{"arguments":["%s"],"target":"Typing","type":1}' % CHAT.encode(),
    b'{"type":1,"target":"Typing","invocationId":null,"arguments":[42]}',
    b'{"type":1,"target":"Typing","arguments":[],"headers":{"a":"b"},"streamIds":[]}',
    b'{"type":1,"target":"Typing"}',  # no arguments: the method answers the bad-arguments error
    b'{"type":1,"target":"Typing","invocationId":"\\u00e9\\"","arguments":["a","b"]}',
    b' {"type" : 1, "target" : "Typing", "arguments" : [{"x": [1]}]} ',
]
"""Records the fast path reads (each its own message, with its ``\\x1e``)."""

LEFT_JSON = [
    b"",
    RS,
    b'{"type":1,"target":"Typing","arguments":["c"]}',  # no separator: a partial record
    b'{"type":1,"target":"Typing","arguments":["c"]}\x1e{"type":6}',  # and a partial one
    b'{"type":1,"target":"Typing","arguments":["c"]}\x1e{"type":6}\x1e',  # two records
    b'{"type":6}\x1e{"type":1,"target":"Typing","arguments":["c"]}\x1e',
    b'{"type":1,"target":"X","invocationId":"1","arguments":[]}\x1e',
    b'{"type":4,"target":"Typing","invocationId":"1","arguments":[]}\x1e',  # a stream invocation
    b'{"type":true,"target":"Typing","arguments":[]}\x1e',
    b'{"type":"1","target":"Typing","arguments":[]}\x1e',
    b'{"type":1.0,"target":"Typing","arguments":[]}\x1e',
    b'{"target":"Typing","arguments":[]}\x1e',
    b'{"type":1,"target":"Typing","invocationId":7,"arguments":[]}\x1e',
    b'{"type":1,"target":"Typing","arguments":"c"}\x1e',
    b'{"type":1,"target":"Typing","arguments":null}\x1e',
    b'{"type":1,"target":"Typing","arguments":["c"]\x1e',  # not JSON
    b'["Typing"]\x1e',
    b'{"type":1,"target":"Typing","arguments":["\xff"]}\x1e',  # not UTF-8
    b'{"type":1,"target":"Typing","arguments":["\x1e"]}\x1e',
    b'{"type":1,"target":"Typing","arguments":["%s"]}\x1e' % (b"x" * 200),  # over the limit
]
"""Messages the fast path leaves to the general path: some valid, some not."""


def _session(handshake: bytes = JSON_HANDSHAKE, *, max_chars: int = 150) -> InboundSession:
    session = InboundSession(max_record_chars=max_chars, stateful_allowed=True)
    assert session.feed(handshake).handshake is not None
    return session


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session without its fast path: what it answered before it had one."""
    monkeypatch.setattr(session_module, "typing_json", lambda data, limit: None)
    monkeypatch.setattr(session_module, "typing_messagepack", lambda data, limit: None)


def _answers(
    monkeypatch: pytest.MonkeyPatch, handshake: bytes, messages: list[Any]
) -> tuple[list[Inbound], list[Inbound]]:
    """Each message fed twice to a fresh session with the fast path and to one without it (a
    stateful session numbers both)."""
    with_fast, without = [], []
    for message in messages:
        fast, slow = _session(handshake), _session(handshake)
        with monkeypatch.context() as patch:
            _general(patch)
            without.extend([slow.feed(message), slow.feed(message)])
        with_fast.extend([fast.feed(message), fast.feed(message)])
    return with_fast, without


@pytest.mark.parametrize("handshake", [JSON_HANDSHAKE, STATEFUL_HANDSHAKE])
def test_json_records_get_the_general_paths_answer(monkeypatch, handshake):
    messages: list[Any] = [r + RS for r in TAKEN_JSON] + LEFT_JSON
    messages += [(r + RS).decode() for r in TAKEN_JSON]  # text frames (str) too
    fast, slow = _answers(monkeypatch, handshake, messages)
    assert fast == slow


def test_the_fast_path_reads_what_it_should_and_leaves_the_rest():
    for record in TAKEN_JSON:
        expected = protocol.parse_message(record.decode())
        assert typing_json(record + RS, 150) == expected
        assert typing_json((record + RS).decode(), 150) == expected
    for message in LEFT_JSON:
        assert typing_json(message, 150) is None, message


def test_a_partial_record_held_goes_the_general_way():
    session = _session()
    record = TAKEN_JSON[0] + RS
    assert session.feed(record[:10]).invocations == []
    inbound = session.feed(record[10:])  # the rest: one whole record, but after a partial
    assert [i.arguments for i in inbound.invocations] == [(CHAT,)]
    assert session.feed(record).invocations == inbound.invocations


def _mp(value: Any) -> bytes:
    return length_prefixed(ormsgpack.packb(value))


TAKEN_MSGPACK = [
    _mp([1, {}, "7", "Typing", [CHAT]]),
    _mp([1, {}, None, "Typing", [42]]),
    _mp([1, {"h": "v"}, "1", "Typing", [], []]),  # headers and streamIds
]
LEFT_MSGPACK = [
    b"",
    b"\x00",
    _mp([1, {}, "7", "Typing", [CHAT]])[:-1],  # partial
    _mp([1, {}, "7", "Typing", [CHAT]]) + _mp([6]),  # two records
    _mp([1, {}, "7", "Typing", ["x" * 200]]),  # a two-byte prefix (and over the limit)
    _mp([1, {}, "7", "Other", []]),
    _mp([4, {}, "7", "Typing", []]),
    _mp([True, {}, "7", "Typing", []]),
    _mp([1, {}, 7, "Typing", []]),
    _mp([1, {}, "7", "Typing", "c"]),
    _mp([1, {}, "7", "Typing"]),
    _mp({"type": 1}),
    b"\x03\xc1\xc1\xc1",  # not MessagePack
]


def test_messagepack_records_get_the_general_paths_answer(monkeypatch):
    fast, slow = _answers(monkeypatch, MSGPACK_HANDSHAKE, TAKEN_MSGPACK + LEFT_MSGPACK)
    assert fast == slow
    for record in TAKEN_MSGPACK:
        assert typing_messagepack(record, 150) == messagepack.parse_message(record[1:])
    for message in LEFT_MSGPACK:
        assert typing_messagepack(message, 150) is None, message


@settings(max_examples=300, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["Typing", "c", "7"]),
        lambda inner: (
            st.lists(inner, max_size=5)
            | st.dictionaries(
                st.sampled_from(["type", "target", "invocationId", "arguments", "x"]),
                inner,
                max_size=5,
            )
        ),
        max_leaves=12,
    ),
)
def test_any_json_value_gets_the_general_paths_answer(value: Any) -> None:
    record = orjson.dumps(value) + RS
    fast = _session()
    slow = _session()
    slow_answer = _without_fast_path(slow, record)
    assert fast.feed(record) == slow_answer


def _without_fast_path(session: InboundSession, message: bytes) -> Inbound:
    json_path, msgpack_path = session_module.typing_json, session_module.typing_messagepack
    session_module.typing_json = lambda data, limit: None  # type: ignore[assignment]
    session_module.typing_messagepack = lambda data, limit: None  # type: ignore[assignment]
    try:
        return session.feed(message)
    finally:
        session_module.typing_json, session_module.typing_messagepack = json_path, msgpack_path


@pytest.mark.parametrize("invocation_id", ["1", "7", "", 'é"\\\n', "x" * 200])
def test_void_completions_are_the_protocols(invocation_id):
    assert void_completion_json(invocation_id) == protocol.completion(invocation_id).encode()
    assert void_completion_messagepack(invocation_id) == messagepack.completion(invocation_id)


# --- the completion written straight to the transport ---------------------------------------


def _server() -> Any:
    """What a :class:`RawSink` reads of its server, the frames written kept in a list."""
    written: list[bytes] = []
    transport = SimpleNamespace(write=written.append, is_closing=lambda: False, written=written)
    writable = asyncio.Event()
    writable.set()
    return SimpleNamespace(transport=transport, writable=writable, close_sent=False)


def _connection(sent: list[int], *, stateful: bool = False, expires_in: float = 60) -> Any:
    session = InboundSession(max_record_chars=1000, stateful_allowed=False)
    session.feed(JSON_HANDSHAKE)
    connection = HubConnection(
        connection_id="c",
        token="t",
        identity=Identity(uuid.uuid4(), expires_at=time.time() + expires_in),
        session=session,
        outbound=Outbound(stateful=stateful, max_pending=16, max_replay_chars=1024),
        limits=ConnectionLimits(),
        on_sent=sent.append,
        now=0.0,
    )
    server = _server()
    connection.attach_sink(RawSink(server))
    return connection, server.transport


async def test_a_reply_is_written_at_once_when_nothing_waits_before_it():
    sent: list[int] = []
    connection, transport = _connection(sent)
    record = void_completion_json("1")
    connection.reply(record)
    assert transport.written == [text_frame(record)]
    assert sent == [1]
    assert not connection.outbound.has_pending()
    connection.send(b"queued\x1e")  # something waits for the writer: the reply goes after it
    connection.reply(record)
    assert transport.written == [text_frame(record)]
    assert connection.outbound.take(1 << 20) == ([b"queued\x1e", record], 2)


async def test_a_reply_is_kept_for_replay_under_stateful_reconnect():
    sent: list[int] = []
    connection, transport = _connection(sent, stateful=True)
    connection.protocol = messagepack_protocol = session_module.PROTOCOLS["messagepack"]
    record = void_completion_messagepack("1")
    connection.reply(record)
    assert transport.written == [binary_frame(record)]
    assert messagepack_protocol.binary
    connection.outbound.rewind()
    assert connection.outbound.take(1 << 20) == ([record], 1)  # replayed on a new transport


async def test_a_reply_to_an_expired_token_waits_for_the_writer():
    sent: list[int] = []
    connection, transport = _connection(sent, expires_in=-1)
    connection.reply(void_completion_json("1"))
    assert transport.written == []
    assert connection.outbound.has_pending()  # the writer closes it (token expired) instead


def test_invocation_values_are_the_general_ones():
    assert typing_json(b'{"type":1,"target":"Typing","arguments":["c"]}\x1e', 100) == Invocation(
        MessageType.INVOCATION, "Typing", None, ("c",)
    )


@settings(max_examples=300, deadline=None)
@given(
    value=st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from([1, 1, True, 1.0, "1", 4, 6, None]),
            "target": st.sampled_from(["Typing", "Typing", "typing", "", 1, None]),
            "invocationId": st.sampled_from(["1", "", None, 1, ["1"]]),
            "arguments": st.sampled_from([[CHAT], [], [1, 2], "c", None, {"a": 1}]),
            "headers": st.sampled_from([{}, {"k": "v"}, None]),
        },
    ),
    binary=st.booleans(),
)
def test_any_invocation_shape_gets_the_general_paths_answer(value: Any, binary: bool) -> None:
    if binary:
        fields = [value.get(k) for k in ("type", "headers", "invocationId", "target", "arguments")]
        message, handshake = _mp(fields), MSGPACK_HANDSHAKE
    else:
        message, handshake = orjson.dumps(value) + RS, JSON_HANDSHAKE
    slow_answer = _without_fast_path(_session(handshake), message)
    assert _session(handshake).feed(message) == slow_answer
