"""The membership mark's bookkeeping and its place in a backplane message (pure)."""

from __future__ import annotations

import time

from realtime_dispatch.delivery.marks import (
    MembershipMark,
    barrier_payload,
    new_token,
    parse_barrier,
)
from realtime_dispatch.hub.backplane.subscriber import (
    MARK_GROUP,
    decode_batch,
    encode_batch,
    split_marks,
)

CHANGE = '{"chatId":"00000000-0000-0000-0000-000000000001","userId":"x","active":true}'


def test_tokens_since_the_last_change_newest_last_two_at_most() -> None:
    mark = MembershipMark()
    assert mark.tokens == ()
    assert mark.due()
    mark.notified(barrier_payload("a"))
    assert mark.tokens == ("a",)
    mark.notified(barrier_payload("b"))
    mark.notified(barrier_payload("c"))
    assert mark.tokens == ("b", "c")
    assert not mark.due()
    mark.notified(CHANGE)
    assert mark.tokens == ()
    assert mark.due()
    mark.notified(barrier_payload("d"))
    assert mark.tokens == ("d",)  # nothing from before the change


def test_a_lost_connection_or_an_unknown_payload_drops_the_tokens() -> None:
    mark = MembershipMark()
    mark.notified(barrier_payload("a"))
    mark.lost()
    assert mark.tokens == ()
    mark.notified(barrier_payload("a"))
    mark.notified('{"something":"new"}')
    assert mark.tokens == ()


def test_a_refresh_is_due_after_refresh_every() -> None:
    mark = MembershipMark(refresh_every=5.0)
    mark.notified(barrier_payload("a"))
    now = time.monotonic()
    assert not mark.due(now + 4.9)
    assert mark.due(now + 5.1)
    assert mark.tokens == ("a",)  # still good until a newer one is heard


def test_barrier_payloads() -> None:
    token = new_token()
    assert parse_barrier(barrier_payload(token)) == token
    assert new_token() != token
    for payload in (CHANGE, '{"barrier":""}', '{"barrier":1}', '{"barrier"', "x"):
        assert parse_barrier(payload) is None, payload


def test_a_batch_message_carries_its_marks_first() -> None:
    items = [("chat:a", b'{"n":1}\x1e'), ("user:b", b'{"n":2}\x1e')]
    entries = decode_batch(encode_batch(items, ("m1", "m2")))
    assert entries is not None
    assert entries[0] == (MARK_GROUP, b"m1 m2")  # what an older replica reads: a push to nobody
    assert split_marks(entries) == (items, ["m1", "m2"])
    plain = decode_batch(encode_batch(items))
    assert plain is not None
    assert split_marks(plain) == (items, [])
