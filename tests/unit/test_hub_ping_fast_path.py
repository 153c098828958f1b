"""The session's fast path for a lone ``Ping`` record (``InboundSession.lone_ping``): it takes a
ping only where the general parse would find nothing to do, and ``receive`` then builds no
``Inbound``; anything else (before the handshake, after a partial record, with more records in
the message, an acknowledgement due) goes the general way, with the same result as before."""

from __future__ import annotations

import pytest

from realtime_dispatch.hub.connections.session import Inbound, InboundSession
from realtime_dispatch.hub.wire import messagepack, protocol

JSON_HANDSHAKE = b'{"protocol":"json","version":1}\x1e'
STATEFUL_HANDSHAKE = b'{"protocol":"json","version":2}\x1e'
MSGPACK_HANDSHAKE = b'{"protocol":"messagepack","version":1}\x1e'
JSON_PING = protocol.PING.encode()
NOTHING = Inbound()


def session(handshake: bytes, *, stateful: bool = False) -> InboundSession:
    made = InboundSession(max_record_chars=1 << 15, stateful_allowed=stateful)
    assert made.feed(handshake).handshake is not None
    return made


@pytest.mark.parametrize(
    ("handshake", "ping", "stateful"),
    [
        (JSON_HANDSHAKE, JSON_PING, False),
        (STATEFUL_HANDSHAKE, JSON_PING, True),
        (MSGPACK_HANDSHAKE, messagepack.PING, False),
    ],
)
def test_a_lone_ping_is_taken_where_the_general_parse_finds_nothing_to_do(
    handshake: bytes, ping: bytes, stateful: bool
) -> None:
    fast = session(handshake, stateful=stateful)
    assert fast.lone_ping(ping)
    general = session(handshake, stateful=stateful)
    assert general.feed_records(ping) == NOTHING  # what the fast path skips
    assert fast.lone_ping(ping)  # it changed no state


def test_a_ping_before_the_handshake_or_after_a_partial_record_is_left() -> None:
    opening = InboundSession(max_record_chars=1 << 15, stateful_allowed=False)
    assert not opening.lone_ping(JSON_PING)
    partial = session(JSON_HANDSHAKE)
    partial.feed(b'{"type":1,"target":"Typing"')
    assert not partial.lone_ping(JSON_PING)
    binary = session(MSGPACK_HANDSHAKE)
    binary.feed(messagepack.PING[:1])  # a length prefix and nothing more
    assert not binary.lone_ping(messagepack.PING)


def test_anything_but_exactly_one_ping_of_the_sessions_protocol_is_left() -> None:
    json_session = session(JSON_HANDSHAKE)
    for data in (
        JSON_PING + JSON_PING,
        b'{"type": 6}\x1e',  # a ping, spelled otherwise: the general parse reads it
        JSON_PING.decode(),  # as str (the ASGI path): the general parse reads it
        messagepack.PING,
        b"",
    ):
        assert not json_session.lone_ping(data), data
    assert not session(MSGPACK_HANDSHAKE).lone_ping(JSON_PING)


def test_a_ping_with_an_acknowledgement_due_is_left_to_the_general_path() -> None:
    stateful = session(STATEFUL_HANDSHAKE, stateful=True)
    # a numbered invocation, then a record that fails: the feed closes, nothing acknowledged
    failed = stateful.feed_records(b'{"type":1,"target":"Nothing","arguments":[]}\x1e[]\x1e')
    assert failed.close is not None
    assert failed.ack_to_send is None
    assert not stateful.lone_ping(JSON_PING)
    assert stateful.feed_records(JSON_PING).ack_to_send == 1  # what the general path does
