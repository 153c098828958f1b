"""Presence over a real socket, memberships from PostgreSQL, in one process (no backplane):
``WatchPresence`` answers for the people the caller shares a chat with (not strangers, not
those who blocked the caller), ``presence_changed`` follows them online and, a grace after their
last connection, offline; a reconnect inside the grace says nothing; a removed member stops
seeing the others; the limit and bad arguments are refused; nothing is written to PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import orjson

from realtime_dispatch.hub.signals.watch_rate import WatchRate
from realtime_dispatch.messenger.blacklist import block_user
from realtime_dispatch.messenger.commands import create_chat, send_message, set_participant
from realtime_dispatch.messenger.reads import mark_read
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import (
    create_shared_chat,
    hub_settings,
    options_for,
    push,
    raw_client,
    running_hub,
)
from tests.integration.chat_pairs import alice_bob_and_a_chat
from tests.integration.presence_calls import invoke, leave_quietly_then_hint, watch, watched


def _member_chats_calls(hub) -> int:
    return hub.hub.signals.presence.member_chats_queries


async def _writes(pool) -> int:
    return await pool.fetchval(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
    )


async def test_watch_answers_shared_chats_only_and_follows_online_offline(pool, start_hub):
    alice, bob, carol, stranger, blocker = (uuid.uuid4() for _ in range(5))
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=alice, title="t", members=[bob, carol, blocker])
        await block_user(conn, owner=blocker, blocked=alice)
    async with (
        start_hub(presence_grace=0.3) as hub,
        raw_client(hub, make_token(alice)) as a,
        raw_client(hub, make_token(carol)),
    ):
        await a.send_record(watch("1", [bob, carol, stranger, blocker]))
        answer = await a.next_of([3])
        assert answer["invocationId"] == "1"
        assert answer["result"] == [
            {"userId": str(bob), "online": False, "lastSeenAt": None},
            {"userId": str(carol), "online": True, "lastSeenAt": None},
        ]
        async with raw_client(hub, make_token(bob)):
            [online] = await a.invocations(1)
            assert online["target"] == "presence_changed"
            assert online["arguments"] == [{"userId": str(bob), "online": True, "lastSeenAt": None}]
            await asyncio.sleep(0.05)
        [offline] = await a.invocations(1, within=3)
        entry = offline["arguments"][0]
        assert (entry["userId"], entry["online"]) == (str(bob), False)
        assert entry["lastSeenAt"].endswith("Z")
        # Back within the grace: nothing said; the watch answer keeps lastSeenAt.
        writes = await _writes(pool)
        async with raw_client(hub, make_token(bob)):
            assert (await a.invocations(1))[0]["arguments"][0]["online"] is True
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.5)
        await a.invocations(1, within=3)  # offline at last
        assert await _writes(pool) == writes  # no PostgreSQL write per connect / disconnect
        # Unwatch: no more events.
        await a.send_record(invoke("2", "UnwatchPresence", [str(bob)]))
        assert await a.next_of([3]) == {"type": 3, "invocationId": "2"}
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.3)
        assert hub.hub.metrics.presence.labels("watched")._value.get() == 2


async def test_removed_member_stops_seeing_presence(pool, start_hub):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_shared_chat(conn, creator=alice, title="t", members=[bob])
        other = await create_shared_chat(conn, creator=alice, title="u", members=[bob])
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        assert len(await watched(a, "1", [bob])) == 1
        presence = hub.hub.signals.presence
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=False)
        await asyncio.sleep(0.3)
        assert presence.watch_count == 1  # still one chat shared
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=other, user_id=bob, active=False)
        await wait_until(lambda: presence.watch_count == 0)
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.3)
        assert (await watched(a, "2", [bob])) == []


async def test_a_hint_that_removes_the_watcher_ends_the_watch(pool, start_hub):
    """A membership hint (no ``active``: the hub reads the user's chats again) that takes the
    watcher out of the only chat shared ends the watch, as a live change does."""
    alice, bob, chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        assert len(await watched(a, "1", [bob])) == 1
        presence = hub.hub.signals.presence
        await leave_quietly_then_hint(pool, chat, alice)
        await wait_until(lambda: presence.watch_count == 0)
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.3)


async def test_bad_presence_input_is_refused(pool, start_hub):
    alice, bob, _chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(presence_watch_limit=3) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        # More calls than the per-user rate lets through (its own test: test_hub_presence_race).
        hub.hub.signals.presence.rate = WatchRate(rate=1000, burst=1000)
        bad = [[], [None], ["x"], [[1]], [[None]], [["not-a-uuid"]], [[str(bob)], 2]]
        for index, arguments in enumerate(bad):
            await a.send_record(invoke(f"b{index}", "WatchPresence", *arguments))
            assert "list of user ids" in (await a.next_of([3]))["error"]
        await a.send_record(invoke("u", "UnwatchPresence", {"a": 1}))
        assert "list of user ids" in (await a.next_of([3]))["error"]
        # Past the limit (3), including a huge list: refused, nothing watched.
        many = [str(uuid.uuid4()) for _ in range(4)]
        await a.send_record(invoke("l1", "WatchPresence", many))
        assert "at most 3" in (await a.next_of([3]))["error"]
        huge = [str(uuid.uuid4()) for _ in range(600)]  # under the frame limit
        await a.send_record(invoke("l2", "WatchPresence", huge))
        assert "at most 3" in (await a.next_of([3]))["error"]
        # Unknown ids (nobody shares a chat with them) answer empty and count nothing.
        await a.send_record(invoke("ok", "WatchPresence", many[:3]))
        assert (await a.next_of([3]))["result"] == []
        assert hub.hub.signals.presence.watch_count == 0
        refused = hub.hub.metrics.presence.labels("refused")._value.get()
        assert refused == len(bad) + 3
        # A flood: 300 WatchPresence in two frames. One runs (one query); the others, while it
        # is in flight, are refused at once.
        queries = _member_chats_calls(hub)
        text = "".join(
            orjson.dumps(invoke(f"f{n}", "WatchPresence", [str(bob)])).decode() + "\x1e"
            for n in range(300)
        )
        for start in range(0, len(text), 30_000):  # under the frame limit
            await a.send(text[start : start + 30_000])
        answers = [await a.next_of([3]) for _ in range(300)]
        done = [r for r in answers if "error" not in r]
        busy = [r for r in answers if "has not completed" in r.get("error", "")]
        assert len(done) >= 1
        assert len(done) + len(busy) == 300
        assert _member_chats_calls(hub) - queries <= len(done)


async def test_a_block_made_after_the_watch_ends_it(pool, start_hub):
    """Bob blocks Alice while she watches him: the ``blacklist_changed`` push to Bob's own group
    ends her watch (she is not told), and her next ``WatchPresence`` leaves him out."""
    alice, bob, carol = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=alice, title="t", members=[bob, carol])
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
        raw_client(hub, make_token(carol)) as c,
    ):
        for client in (a, c):
            assert len(await watched(client, "1", [bob])) == 1
        presence = hub.hub.signals.presence
        assert presence.watch_count == 2
        async with pool.acquire() as conn:
            entry = await block_user(conn, owner=bob, blocked=alice)
        payload = {"entryId": str(entry), "blockedUserId": str(alice), "blocked": True}
        payload["changedAt"] = "2026-12-01T10:00:00Z"  # what the dispatcher pushes to Bob
        await push(hub, f"user:{bob}", "blacklist_changed", payload)
        await wait_until(lambda: presence.watch_count == 1)  # Carol's is left
        async with raw_client(hub, make_token(bob)):
            [online] = await c.invocations(1)
            assert online["arguments"][0]["userId"] == str(bob)
            await a.assert_silent(0.3)
        assert (await watched(a, "2", [bob])) == []
        # A lifted block (or any other push to Bob) ends nothing.
        await push(hub, f"user:{bob}", "blacklist_changed", {**payload, "blocked": False})
        await push(hub, f"user:{carol}", "blacklist_changed", {**payload, "blockedUserId": "x"})
        await asyncio.sleep(0.1)
        assert presence.watch_count == 1


async def test_a_hint_for_a_watched_user_not_connected_here_is_read(pool, start_hub):
    """Bob has no connection on this hub: a hint that takes him out of the only chat he shares
    with Alice is read by presence (the membership feed reads only connected users), and her
    watch ends."""
    alice, bob, chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        assert (await watched(a, "1", [bob]))[0]["online"] is False
        presence = hub.hub.signals.presence
        queries = _member_chats_calls(hub)
        await leave_quietly_then_hint(pool, chat, bob)
        await wait_until(lambda: presence.watch_count == 0)
        assert _member_chats_calls(hub) == queries + 1
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.3)


async def test_presence_shows_only_through_a_chat_the_watched_user_took_part_in(database_url, pool):
    """Issue 47, point 4 (RELIABILITY H34): Alice makes a chat with a stranger alone; her
    ``WatchPresence`` of him answers ``[]`` and his comings and goings tell her nothing. Once he
    takes part (reads there, or sends), he shows. Without the manifest's ``presence_chats`` (an
    adopter's schema that sets none) every active chat shows, as before."""
    alice, stranger, reader = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t", members=[stranger, reader])
        await send_message(conn, chat_id=chat, sender=alice, body="hello?")
    settings = hub_settings()
    options = options_for(settings, presence_grace=0.05)
    async with (
        running_hub(settings, dsn=database_url, pool=pool, options=options) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        assert (await watched(a, "1", [stranger, reader])) == []
        async with raw_client(hub, make_token(stranger)):
            await a.assert_silent(0.3)
        assert hub.hub.signals.presence.watch_count == 0
        async with pool.acquire() as conn:
            await mark_read(conn, chat_id=chat, user_id=reader, seq=1)  # a read takes part
            await send_message(conn, chat_id=chat, sender=stranger, body="hi")  # so does a send
        answer = await watched(a, "2", [stranger, reader])
        assert {e["userId"] for e in answer} == {str(stranger), str(reader)}
    # The hook unset: every active membership shows.
    other = uuid.uuid4()
    async with pool.acquire() as conn:
        await create_chat(conn, creator=alice, title="u", members=[other])
    options = options_for(settings, presence_grace=0.05, presence_chats_sql=None)
    async with (
        running_hub(settings, dsn=database_url, pool=pool, options=options) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        assert [e["userId"] for e in (await watched(a, "3", [other]))] == [str(other)]


async def test_a_first_read_or_send_is_hinted_so_a_kept_watch_scope_learns_it(pool, start_hub):
    """Issue 47, point 4: Carol watches Bob and Dave through a chat they took part in, so this
    replica keeps their chats. Alice makes a chat with them: her watch is refused (they have not
    taken part there). Bob (connected here) sends there and Dave (not connected) reads there:
    each first take-part hints the hubs, which read the two again, and Alice's next watch
    answers both without anyone reconnecting."""
    alice, bob, carol, dave = (uuid.uuid4() for _ in range(4))
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=carol, title="c", members=[bob, dave])
        chat = await create_chat(conn, creator=alice, title="a", members=[bob, dave])
        await send_message(conn, chat_id=chat, sender=alice, body="lunch?")
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(carol)) as c,
        raw_client(hub, make_token(bob)),
        raw_client(hub, make_token(alice)) as a,
    ):
        assert {e["userId"] for e in (await watched(c, "1", [bob, dave]))} == {str(bob), str(dave)}
        assert (await watched(a, "2", [bob, dave])) == []
        queries = _member_chats_calls(hub)
        async with pool.acquire() as conn:
            await send_message(conn, chat_id=chat, sender=bob, body="yes")
            await mark_read(conn, chat_id=chat, user_id=dave, seq=1)
            await send_message(conn, chat_id=chat, sender=bob, body="noon")  # no hint again
            await mark_read(conn, chat_id=chat, user_id=dave, seq=2)
        scope = hub.hub.signals.presence.scope
        await wait_until(
            lambda: (
                all(len(scope._chats.get(u, ())) == 2 for u in (bob, dave))
                and scope._rereader is None
            )
        )
        assert _member_chats_calls(hub) - queries <= 2  # the two first take-parts, no more
        answer = await watched(a, "3", [bob, dave])
        assert {e["userId"] for e in answer} == {str(bob), str(dave)}


async def test_only_a_first_take_part_is_hinted(database_url, pool):
    """The hint costs one notification per member and chat: a member's first send or first
    read mark; not the creator's, not later sends or reads."""
    alice, bob, dave = (uuid.uuid4() for _ in range(3))
    heard: list[dict[str, object]] = []
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(
        "realtime_membership", lambda *args: heard.append(orjson.loads(args[3]))
    )
    try:
        async with pool.acquire() as conn:
            chat = await create_chat(conn, creator=alice, title="a", members=[bob, dave])
            await asyncio.sleep(0.2)
            heard.clear()  # the joins of the creation
            for body in ("one", "two"):
                await send_message(conn, chat_id=chat, sender=alice, body=body)
                await send_message(conn, chat_id=chat, sender=bob, body=body)
            for seq in (1, 2):
                await mark_read(conn, chat_id=chat, user_id=dave, seq=seq)
                await mark_read(conn, chat_id=chat, user_id=bob, seq=seq)
        hints = [{"chatId": str(chat), "userId": str(u)} for u in (bob, dave)]
        await wait_until(lambda: len(heard) >= 2)
        await asyncio.sleep(0.2)
        assert heard == hints
    finally:
        await listener.close()
