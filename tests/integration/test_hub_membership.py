"""Groups from the database: initial chat groups on connect, live add/remove through
``realtime_membership`` notifications, and resync after the listening connection is lost."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import push, raw_client
from tests.integration.chat_pairs import alice_bob_and_a_chat


async def test_initial_groups_are_active_chats(pool, start_hub):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t", members=[bob])
        other = await create_chat(conn, creator=alice, title="u", members=[bob])
        await set_participant(conn, chat_id=other, user_id=bob, active=False)
    async with (
        start_hub() as hub,
        raw_client(hub, make_token(bob)) as client,
    ):
        [cid] = hub.hub.connections
        assert hub.hub.registry.groups_of(cid) == {f"user:{bob}", chat_group(chat)}
        await push(hub, chat_group(chat), "message_received", {"seq": 1})
        await push(hub, chat_group(other), "message_received", {"seq": 99})
        await push(hub, chat_group(chat), "message_received", {"seq": 2})
        records = await client.invocations(2)
        assert [r["arguments"][0]["seq"] for r in records] == [1, 2]


async def test_connections_opening_together_share_membership_queries(pool, start_hub):
    """Forty users connecting at once, each in a chat of their own and all in one shared chat:
    each joins exactly its chats, with fewer queries than connections."""
    alice = uuid.uuid4()
    users = [uuid.uuid4() for _ in range(40)]
    async with pool.acquire() as conn:
        shared = await create_chat(conn, creator=alice, title="all", members=users)
        own = [await create_chat(conn, creator=u, title="own") for u in users]
    async with (
        start_hub() as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        feed = hub.hub.membership
        before = feed.load_queries
        clients = await asyncio.gather(
            *(stack.enter_async_context(raw_client(hub, make_token(u))) for u in users)
        )
        assert 1 <= feed.load_queries - before < len(users)
        by_user = {c.user_id: cid for cid, c in hub.hub.connections.items()}
        for user, chat in zip(users, own, strict=True):
            assert hub.hub.registry.groups_of(by_user[user]) == {
                f"user:{user}",
                chat_group(chat),
                chat_group(shared),
            }
        await push(hub, chat_group(own[3]), "message_received", {"seq": 3})
        await push(hub, chat_group(shared), "message_received", {"seq": 1})
        for index, client in enumerate(clients):
            expected = [3, 1] if index == 3 else [1]
            records = await client.invocations(len(expected))
            assert [r["arguments"][0]["seq"] for r in records] == expected


async def test_live_add_and_remove_on_one_replica(pool, start_hub):
    _alice, bob, chat = await alice_bob_and_a_chat(pool, bob_member=False)
    async with (
        start_hub() as hub,
        raw_client(hub, make_token(bob)) as b1,
        raw_client(hub, make_token(bob)) as b2,
    ):
        group = chat_group(chat)
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=True)
        # No waiting: the publisher orders the push after the committed change.
        await push(hub, group, "message_received", {"seq": 1})
        for client in (b1, b2):
            [record] = await client.invocations(1)
            assert record["arguments"] == [{"seq": 1}]
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=False)
        await push(hub, group, "message_received", {"seq": 2})
        await push(hub, f"user:{bob}", "marker", {})
        for client in (b1, b2):
            [record] = await client.invocations(1)
            assert record["target"] == "marker"  # seq 2 never arrived


async def test_removal_is_applied_before_every_push_after_it(pool, start_hub):
    """Many rounds of remove → push with no pause: the removed member never gets the push."""
    _alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with (
        start_hub() as hub,
        raw_client(hub, make_token(bob)) as client,
    ):
        group = chat_group(chat)
        for round_ in range(20):
            async with pool.acquire() as conn:
                await set_participant(conn, chat_id=chat, user_id=bob, active=False)
            await push(hub, group, "message_received", {"leaked": round_})
            async with pool.acquire() as conn:
                await set_participant(conn, chat_id=chat, user_id=bob, active=True)
            await push(hub, group, "message_received", {"ok": round_})
        records = await client.invocations(20)
        assert [r["arguments"][0] for r in records] == [{"ok": n} for n in range(20)]


async def test_resync_after_listener_connection_is_killed(pool, start_hub):
    _alice, bob, chat = await alice_bob_and_a_chat(pool, bob_member=False)
    async with (
        start_hub() as hub,
        raw_client(hub, make_token(bob)) as client,
    ):
        feed = hub.hub.membership
        await pool.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'realtime-dispatch-hub-membership'"
            " AND datname = current_database()"  # this test's hub only, not other databases'
        )
        await wait_until(lambda: not feed.ready.is_set(), within=5)
        # While the listener is down the notification is lost; the resync must catch it.
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=True)
        await wait_until(feed.ready.is_set, within=10)
        await push(hub, chat_group(chat), "message_received", {"seq": 1})
        [record] = await client.invocations(1)
        assert record["arguments"] == [{"seq": 1}]
