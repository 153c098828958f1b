"""Typing's pure parts: the per-(user, chat) gate, the argument check, the session passing the
invocation on, and the completions in both protocols."""

from __future__ import annotations

import uuid

import ormsgpack

from realtime_dispatch.hub.connections.session import InboundSession
from realtime_dispatch.hub.signals.typing_signal import TypingGate, chat_of
from realtime_dispatch.hub.wire import messagepack, protocol
from realtime_dispatch.hub.wire.protocol import Invocation

RS = "\x1e"


def test_gate_passes_once_per_interval_per_key():
    gate = TypingGate(2.0)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    assert gate.allow((alice, "chat:a"), 10.0)
    assert not gate.allow((alice, "chat:a"), 11.9)
    assert gate.allow((alice, "chat:b"), 11.9)  # another chat
    assert gate.allow((bob, "chat:a"), 11.9)  # another user
    assert gate.allow((alice, "chat:a"), 12.1)


def test_gate_forgets_expired_keys_so_a_flood_stays_bounded():
    gate = TypingGate(1.0)
    user = uuid.uuid4()
    passed = sum(gate.allow((user, "chat:x"), i / 1000) for i in range(1000))
    assert passed == 1  # 1,000 a second on one chat: one fan-out
    for i in range(10_000):
        gate.allow((user, f"chat:{i}"), 5.0 + i)  # each key expires before the next
    assert len(gate) == 1


def test_chat_of_normalises_uuid_and_refuses_bad_arguments():
    chat = uuid.uuid4()
    assert chat_of((str(chat).upper(),)) == (str(chat), f"chat:{chat}")
    assert chat_of((42,)) == (42, "chat:42")  # bigint keys
    assert chat_of(("room-1",)) == ("room-1", "chat:room-1")  # text keys
    for bad in [(), (1, 2), (None,), (True,), ([1],), ({"a": 1},), ("x" * 500,), ("a\nb",)]:
        assert chat_of(bad) is None, bad


def test_session_passes_typing_on_and_answers_other_methods():
    session = InboundSession(max_record_chars=1000, stateful_allowed=False)
    session.feed('{"protocol":"json","version":1}' + RS)
    inbound = session.feed(
        '{"type":1,"target":"Typing","invocationId":"1","arguments":["c"]}'
        + RS
        + '{"type":1,"target":"Typing","arguments":[7]}'
        + RS
        + '{"type":1,"target":"X","invocationId":"2","arguments":[]}'
        + RS
    )
    assert [i.arguments for i in inbound.invocations] == [("c",), (7,)]
    assert [i.invocation_id for i in inbound.invocations] == ["1", None]
    assert len(inbound.replies) == 1
    assert b"Unknown hub method 'X'" in inbound.replies[0]


def test_messagepack_invocation_carries_arguments():
    record = ormsgpack.packb([1, {}, "5", "Typing", ["c"]])
    assert messagepack.parse_message(record) == Invocation(
        protocol.MessageType.INVOCATION, "Typing", "5", ("c",)
    )


def test_completions():
    assert protocol.completion("1") == '{"type":3,"invocationId":"1"}' + RS
    assert protocol.completion("1", [1]) == '{"type":3,"invocationId":"1","result":[1]}' + RS
    void = messagepack.BinaryRecordBuffer(1000).feed(messagepack.completion("1"))
    assert [ormsgpack.unpackb(r) for r in void] == [[3, {}, "1", 2]]
