"""GroupRegistry, MembershipTracker, the outbound buffer, negotiations and auth: pure logic."""

from __future__ import annotations

import time
import uuid

import jwt
import pytest

from realtime_dispatch.auth.tokens import (
    AuthError,
    TokenVerifier,
    request_token,
    service_key_matches,
)
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.registry import (
    GroupRegistry,
    chat_group,
    is_valid_group,
    user_group,
)
from realtime_dispatch.hub.membership.tracker import (
    MembershipChange,
    MembershipTracker,
    parse_change,
)
from realtime_dispatch.hub.transports.negotiate import NegotiationStore, negotiate_body

U1, U2 = uuid.uuid4(), uuid.uuid4()
C1, C2 = uuid.uuid4(), uuid.uuid4()


def test_registry_join_leave_remove():
    registry = GroupRegistry()
    registry.add_connection("a", U1)
    registry.add_connection("b", U1)
    registry.add_connection("c", U2)
    registry.join("a", "g")
    registry.join("c", "g")
    registry.join("zzz", "g")  # unknown connection: ignored
    assert sorted(registry.members("g")) == ["a", "c"]
    assert sorted(registry.connections_of(U1)) == ["a", "b"]
    registry.leave("a", "g")
    assert registry.members("g") == ("c",)
    registry.remove_connection("c")
    assert registry.members("g") == ()
    assert registry.group_count() == 0
    assert registry.users() == {U1}
    with pytest.raises(ValueError, match="already"):
        registry.add_connection("a", U2)


def test_registry_set_groups_with_prefix_keeps_others():
    registry = GroupRegistry()
    registry.add_connection("a", U1)
    registry.join("a", user_group(U1))
    registry.join("a", chat_group(C1))
    registry.set_groups_with_prefix("a", "chat:", [chat_group(C2)])
    assert registry.groups_of("a") == {user_group(U1), chat_group(C2)}


def test_tracker_live_changes_apply_to_every_connection_of_the_user():
    registry = GroupRegistry()
    tracker = MembershipTracker(registry)
    registry.add_connection("a", U1)
    registry.add_connection("b", U1)
    tracker.apply(MembershipChange(C1, U1, True))
    assert sorted(registry.members(chat_group(C1))) == ["a", "b"]
    tracker.apply(MembershipChange(C1, U1, False))
    assert registry.members(chat_group(C1)) == ()


def test_tracker_change_during_load_wins_over_snapshot():
    registry = GroupRegistry()
    tracker = MembershipTracker(registry)
    registry.add_connection("a", U1)
    token = tracker.begin_load()
    # The user is removed from C1 while the snapshot (which still has C1) is in flight.
    tracker.apply(MembershipChange(C1, U1, False))
    tracker.apply(MembershipChange(C2, U1, True))
    tracker.finish_load(token, [(U1, C1)], users=[U1], connections=["a"])
    assert registry.groups_of("a") == {chat_group(C2)}


def _a_of_u1_in_c1_and_b_of_u2() -> tuple[GroupRegistry, MembershipTracker]:
    """Connection ``a`` of U1 in chat C1's group, ``b`` of U2 in none; their tracker."""
    registry = GroupRegistry()
    tracker = MembershipTracker(registry)
    registry.add_connection("a", U1)
    registry.add_connection("b", U2)
    registry.join("a", chat_group(C1))
    return registry, tracker


def test_tracker_resync_replaces_chat_groups():
    registry, tracker = _a_of_u1_in_c1_and_b_of_u2()
    token = tracker.begin_load()
    tracker.finish_load(token, [(U1, C2)], users=[U1, U2])
    assert registry.groups_of("a") == {chat_group(C2)}
    assert registry.groups_of("b") == frozenset()


def test_tracker_hint_leaves_the_user_to_a_later_load():
    """A hint while a snapshot is in flight: that snapshot may predate the change, so it sets
    nobody of the hinted user; the re-read begun after the hint sets every connection."""
    registry, tracker = _a_of_u1_in_c1_and_b_of_u2()
    in_flight = tracker.begin_load()
    assert tracker.hint(U1)
    assert not tracker.hint(uuid.uuid4())  # nobody of that user here: nothing to read
    tracker.finish_load(in_flight, [(U1, C2), (U2, C2)], users=[U1, U2])
    assert registry.groups_of("a") == {chat_group(C1)}  # untouched by the stale snapshot
    assert registry.groups_of("b") == {chat_group(C2)}
    reread = tracker.begin_load()
    tracker.finish_load(reread, [(U1, C2)], users=[U1])
    assert registry.groups_of("a") == {chat_group(C2)}
    with pytest.raises(ValueError, match="hint"):
        tracker.apply(MembershipChange(C1, U1))


def test_tracker_tells_each_join_and_leave_live_or_by_snapshot():
    """What presence hears: a live change, and the difference a snapshot (a hint's re-read, a
    resync) makes to a connected user's chats; a user with no connection here is not told."""
    registry = GroupRegistry()
    tracker = MembershipTracker(registry)
    told: list[tuple[uuid.UUID, str, bool]] = []
    tracker.on_change = lambda user, group, joined: told.append((user, group, joined))
    registry.add_connection("a", U1)
    registry.add_connection("b", U1)
    tracker.apply(MembershipChange(C1, U1, True))
    assert told == [(U1, chat_group(C1), True)]
    told.clear()
    reread = tracker.begin_load()
    tracker.finish_load(reread, [(U1, C2)], users=[U1, U2])
    assert sorted(told, key=str) == sorted(
        [(U1, chat_group(C2), True), (U1, chat_group(C1), False)], key=str
    )
    told.clear()
    again = tracker.begin_load()
    tracker.finish_load(again, [(U1, C2)], users=[U1])
    assert told == []  # nothing changed


def test_parse_change():
    payload = f'{{"chatId":"{C1}","userId":"{U1}","active":false}}'
    assert parse_change(payload) == MembershipChange(C1, U1, False)
    assert parse_change(f'{{"chatId":"{C1}","userId":"{U1}"}}') == MembershipChange(C1, U1)
    hint = f'{{"chatId":"{C1}","userId":"{U1}","active":null}}'
    assert parse_change(hint) == MembershipChange(C1, U1, None)
    for bad in [
        "",
        "[]",
        '{"chatId":"x","userId":"y","active":true}',
        '{"active":1}',
        f'{{"chatId":"{C1}","userId":"{U1}","active":1}}',
        f'{{"chatId":"{C1}"}}',
    ]:
        assert parse_change(bad) is None


def test_outbound_plain_drops_sent_and_bounds_pending():
    out = Outbound(stateful=False, max_pending=3, max_replay_chars=0)
    assert all(out.push(r) for r in (b"a", b"b", b"c"))
    assert not out.push(b"d")
    out.push_control(b"P")
    batch, sequenced = out.take(max_chars=100)
    assert batch == [b"P", b"a", b"b", b"c"]
    assert sequenced == 3
    assert not out.has_pending()
    assert out.push(b"e")


def test_outbound_stateful_replays_unacked_after_rewind():
    out = Outbound(stateful=True, max_pending=100, max_replay_chars=10)
    for r in (b"a1", b"b2", b"c3"):
        assert out.push(r)
    assert out.take(max_chars=2) == ([b"a1"], 1)
    assert out.take(max_chars=100) == ([b"b2", b"c3"], 2)
    out.ack(1)
    assert out.rewind() == 2
    assert out.take(max_chars=100) == ([b"b2", b"c3"], 2)
    out.ack(99)  # acks beyond what was written are clamped
    assert out.rewind() == 4
    assert out.push(b"x" * 10)
    assert not out.push(b"y")


def test_outbound_push_written_counts_as_sent_and_keeps_replay():
    plain = Outbound(stateful=False, max_pending=2, max_replay_chars=0)
    for _ in range(5):  # written at once: never pending, so never "too slow"
        assert plain.push_written(b"r")
    assert not plain.has_pending()
    assert plain.push(b"q")
    assert plain.take(max_chars=100) == ([b"q"], 1)

    stateful = Outbound(stateful=True, max_pending=100, max_replay_chars=4)
    assert stateful.push_written(b"w1")
    assert stateful.push(b"q2")
    assert stateful.take(max_chars=100) == ([b"q2"], 1)
    assert stateful.rewind() == 1  # the written record is replayed until acknowledged
    assert stateful.take(max_chars=100) == ([b"w1", b"q2"], 2)
    assert not stateful.push_written(b"x")  # replay bound: the consumer is too slow


def test_outbound_push_written_run_numbers_records_without_keeping_them():
    plain = Outbound(stateful=False, max_pending=2, max_replay_chars=0)
    for _ in range(3):  # written at once: never pending, whatever the run's length
        assert plain.push_written_run(8)
    assert not plain.has_pending()
    assert plain.push(b"q")
    assert plain.take(max_chars=100) == ([b"q"], 1)
    stateful = Outbound(stateful=True, max_pending=100, max_replay_chars=100)
    with pytest.raises(ValueError, match="stateful"):
        stateful.push_written_run(1)


def test_negotiation_store_claims_by_token_or_id_once():
    store = NegotiationStore(ttl=10)
    n = store.create(U1, stateful=True, now=0)
    assert store.claim(n.token, U2, now=1) is None  # another user
    assert store.claim(n.connection_id, U1, now=1) == n
    assert store.claim(n.token, U1, now=1) is None  # used
    old = store.create(U1, stateful=False, now=0)
    assert store.claim(old.token, U1, now=11) is None
    store.sweep(now=11)
    assert len(store) == 0
    body = negotiate_body(n, version=1)
    assert list(body) == [
        "negotiateVersion",
        "connectionId",
        "availableTransports",
        "connectionToken",
        "useStatefulReconnect",
    ]
    # Version 0 (signalrcore asks without negotiateVersion): the field is written, as 0, and
    # no connectionToken (the WebSocket's id is then the connectionId).
    plain = negotiate_body(old, version=0)
    assert plain == {
        "negotiateVersion": 0,
        "connectionId": old.connection_id,
        "availableTransports": plain["availableTransports"],
    }
    assert negotiate_body(old, version=2)["negotiateVersion"] == 1


SECRET = "unit-secret-unit-secret-unit-secret-!!"


async def test_token_verifier():
    verifier = TokenVerifier(SECRET)
    good = jwt.encode({"sub": str(U1), "exp": time.time() + 60}, SECRET, algorithm="HS256")
    assert (await verifier.verify(good)).user_id == U1
    cases = {
        "MissingToken": None,
        "Expired": jwt.encode({"sub": str(U1), "exp": time.time() - 60}, SECRET, "HS256"),
        "InvalidToken": jwt.encode({"sub": str(U1)}, SECRET, algorithm="HS256"),
        "InvalidSubject": jwt.encode({"sub": "bob", "exp": time.time() + 60}, SECRET, "HS256"),
    }
    for code, token in cases.items():
        with pytest.raises(AuthError) as failure:
            await verifier.verify(token)
        assert failure.value.code == code
    with pytest.raises(AuthError):
        await TokenVerifier(None).verify(good)
    none_alg = jwt.encode({"sub": str(U1), "exp": time.time() + 60}, None, algorithm="none")
    with pytest.raises(AuthError):
        await verifier.verify(none_alg)


def test_token_sources_and_service_key():
    assert request_token({"authorization": "Bearer abc"}, {}) == "abc"
    assert request_token({}, {"access_token": "q"}) == "q"
    assert request_token({"authorization": "Basic x"}, {}) is None
    assert service_key_matches({"authorization": "Bearer k"}, "k")
    assert not service_key_matches({"authorization": "Bearer k2"}, "k")
    assert not service_key_matches({}, "k")
    assert not service_key_matches({"authorization": "Bearer k"}, None)


def test_group_names():
    assert is_valid_group("chat:x")
    assert not is_valid_group("")
    assert not is_valid_group("a\nb")
