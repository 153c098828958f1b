"""Presence's and the signals' pure parts: the id list check, the backplane envelope, and the
receiving side of typing leaving out the typist, its own echo and malformed envelopes."""

from __future__ import annotations

import uuid

from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.signals.presence import parse_ids, presence_entry, presence_group
from realtime_dispatch.hub.signals.typing_signal import TypingSignals
from realtime_dispatch.hub.wire.signal_envelope import decode_signal, encode_signal, is_signal


def test_parse_ids_takes_one_list_of_ids_and_stops_past_the_limit():
    a, b = uuid.uuid4(), uuid.uuid4()
    assert parse_ids(([str(a), str(b), str(a)],), "W", 5) == [a, b]
    assert parse_ids(([str(a).upper()],), "W", 5) == [a]
    for bad in ((), (None,), (str(a),), ([str(a)], 1), ([1],), ([None],), (["x" * 100],)):
        assert parse_ids(bad, "W", 5) == "W takes one argument: a list of user ids.", bad
    # Past the limit the list is refused as it is, unread (duplicates count).
    assert parse_ids(([str(a)] * 6,), "W", 5) == (
        "W refused: at most 5 watched users per connection."
    )
    assert parse_ids((["not an id"] * 100_000,), "W", 5) == (
        "W refused: at most 5 watched users per connection."
    )


def test_presence_payload_and_group():
    user = uuid.uuid4()
    assert presence_group(user) == f"presence:{user}"
    assert presence_entry(user, True, None) == {
        "userId": str(user),
        "online": True,
        "lastSeenAt": None,
    }


def test_envelope_round_trip_and_malformed():
    record = '{"type":1,"target":"user_typing","arguments":[{"x":"ü"}]}\x1e'.encode()
    envelope = encode_signal("replica", "user-1", record)
    assert is_signal(envelope)
    assert not is_signal(record)
    signal = decode_signal(envelope)
    assert signal is not None
    assert (signal.origin, signal.except_user, signal.record) == ("replica", "user-1", record)
    for bad in (b"\xff", b"\xffr\nu\n", b"\xffr\n\nx", b"\xff\nu\nx", b"\xffr\nu\n\xfe", record):
        assert decode_signal(bad) is None, bad


async def test_received_signals_skip_the_typist_the_own_echo_and_bad_envelopes():
    registry = GroupRegistry()
    typist, other = uuid.uuid4(), uuid.uuid4()
    for connection_id, user in (("c1", typist), ("c1b", typist), ("c2", other)):
        registry.add_connection(connection_id, user)
        registry.join(connection_id, "chat:x")
    registry.add_connection("c3", other)  # not in the chat
    counts: list[str] = []
    sent: list[tuple[list[str], bytes]] = []

    def send(members, record) -> int:
        sent.append((sorted(members), record))
        return len(members)

    signals = TypingSignals(registry, send, interval=2.0, count=counts.append, origin="me")
    record = b'{"type":1,"target":"user_typing","arguments":[]}\x1e'
    push = b'{"type":1,"target":"message_received","arguments":[]}\x1e'
    items = [
        ("chat:x", encode_signal("other-replica", str(typist), record)),
        ("chat:x", push),
        ("chat:x", encode_signal("me", str(typist), record)),  # its own, back from Redis
        ("chat:x", encode_signal("other-replica", "not-a-user", record)),
        ("chat:x", b"\xff\xfe"),
    ]
    assert signals.received(items) == [("chat:x", push)]
    assert sent == [(["c2"], record)]  # neither of the typist's connections
    assert counts == ["received", "invalid", "invalid"]
