"""A presence watch cannot outlive the shared chat (issue 47, point 4; RELIABILITY H32): Alice
loops ``WatchPresence([Bob])`` (one call in flight at a time) while Bob removes her from their
group (or Bob leaves it); once that has reached her replica she watches nothing of Bob, a fresh
``WatchPresence([Bob])`` answers ``[]``, and Bob's reconnect tells her nothing. 20 runs on one
hub, 20 across two replicas on the Redis backplane: no leak. Also: a ``WatchPresence`` drops
the ids it asked for before and may no longer watch, and a user past the rate gets an error."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.hub.signals.hub_signals import SIGNAL_QUERIES
from realtime_dispatch.hub.signals.watch_rate import WatchRate
from realtime_dispatch.messenger.blacklist import block_user
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import (
    create_shared_chat,
    hub_settings,
    options_for,
    raw_client,
    running_hub,
)
from tests.integration.chat_pairs import alice_bob_and_a_chat
from tests.integration.presence_calls import watch, watched

RUNS = 20


async def _race(pool, alice_hub, bob_hub, *, leaves: bool = False) -> int:
    """One run; the number of leaks (0 or more). ``leaves``: Bob leaves the group instead of
    removing Alice."""
    alice, bob, carol = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=bob, title="g", members=[alice, carol])
    presence = alice_hub.hub.signals.presence
    presence.rate = WatchRate(rate=10_000, burst=10_000)  # the loop is the attack here
    async with raw_client(alice_hub, make_token(alice)) as a:
        [connection] = [c for c, x in alice_hub.hub.connections.items() if x.user_id == alice]
        async with raw_client(bob_hub, make_token(bob)):
            stop = asyncio.Event()

            async def loop() -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    await a.send_record(watch(str(n), [bob]))
                    await a.next_of([3])

            looping = asyncio.create_task(loop())
            await asyncio.sleep(0.02)
            async with pool.acquire() as conn:
                who = bob if leaves else alice
                await set_participant(conn, chat_id=chat, user_id=who, active=False)
            if leaves:  # Alice's replica hears it (Bob's connection there, or a hint)
                [bobs] = [c for c, x in bob_hub.hub.connections.items() if x.user_id == bob]
                await wait_until(
                    lambda: chat_group(chat) not in bob_hub.hub.registry.groups_of(bobs)
                )
                await asyncio.sleep(0.2)
            else:
                await wait_until(
                    lambda: chat_group(chat) not in alice_hub.hub.registry.groups_of(connection)
                )
            await asyncio.sleep(0.05)  # the loop goes on past the removal
            stop.set()
            await looping
        leaks = presence.scope.watches.get(connection, 0)
        await a.send_record(watch("fresh", [bob]))
        fresh = await a.next_of([3])
        leaks += len(fresh["result"])
        # Bob reconnects (online, after his grace): nothing reaches Alice.
        with contextlib.suppress(TimeoutError):
            while True:  # what the loop's answers left in flight
                await a.next_of([1], within=0.1)
        async with raw_client(bob_hub, make_token(bob)):
            with contextlib.suppress(AssertionError):
                await a.assert_silent(0.2)
                return leaks
            return leaks + 1


async def test_a_watch_loop_racing_a_removal_leaks_nothing_on_one_hub(pool, start_hub):
    async with start_hub(presence_grace=0.05) as hub:
        leaks = [await _race(pool, hub, hub) for _ in range(RUNS)]
        left = [await _race(pool, hub, hub, leaves=True) for _ in range(RUNS)]
    assert leaks == [0] * RUNS
    assert left == [0] * RUNS


async def test_a_watch_loop_racing_a_removal_leaks_nothing_across_replicas(
    database_url, pool, redis_url
):
    settings = hub_settings(backplane_enabled=True, redis_url=redis_url)
    options = options_for(settings, presence_grace=0.05)
    async with (
        running_hub(settings, dsn=database_url, pool=pool, options=options) as one,
        running_hub(settings, dsn=database_url, pool=pool, options=options) as two,
    ):
        leaks = [await _race(pool, one, two) for _ in range(RUNS)]
        left = [await _race(pool, one, two, leaves=True) for _ in range(RUNS)]
    assert leaks == [0] * RUNS
    assert left == [0] * RUNS


async def test_watch_presence_drops_the_ids_it_may_no_longer_watch(pool, start_hub):
    """Bob blocks Alice and no ``blacklist_changed`` reaches her replica (a sharded backplane
    routes it only where Bob is): her next ``WatchPresence([Bob])`` ends the watch it kept."""
    alice, bob, _chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(presence_grace=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
    ):
        presence = hub.hub.signals.presence
        assert len(await watched(a, "1", [bob])) == 1
        assert presence.watch_count == 1
        async with pool.acquire() as conn:
            await block_user(conn, owner=bob, blocked=alice)  # not pushed to the hub here
        assert presence.watch_count == 1
        assert (await watched(a, "2", [bob])) == []
        assert presence.watch_count == 0
        async with raw_client(hub, make_token(bob)):
            await a.assert_silent(0.3)


@pytest.mark.parametrize("connections", [1, 3])
async def test_watch_presence_past_the_rate_is_refused(database_url, pool, connections):
    """Ten at once, then two a second per user, whatever the number of connections."""
    alice, bob, _chat = await alice_bob_and_a_chat(pool, taken_part=True)
    settings = hub_settings()
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [
            await stack.enter_async_context(raw_client(hub, make_token(alice)))
            for _ in range(connections)
        ]
        answers = []
        for n in range(12):
            client = clients[n % connections]
            await client.send_record(watch(str(n), [bob]))
            answers.append(await client.next_of([3]))
        errors = [a.get("error") for a in answers]
        assert errors[:10] == [None] * 10
        assert all(e is not None and "2 a second per user" in e for e in errors[10:])


async def test_the_queries_a_watch_flood_causes_are_bounded_per_replica(database_url, pool):
    """Ten users' ``WatchPresence`` at once while the membership table is locked: at most
    ``SIGNAL_QUERIES`` (4) of their queries reach PostgreSQL, the others wait their turn on the
    replica (and so hold no pool connection); unlocked, every one is answered."""
    users = [uuid.uuid4() for _ in range(10)]
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=users[0], title="t", members=users[1:])
    settings = hub_settings()
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [await stack.enter_async_context(raw_client(hub, make_token(u))) for u in users]
        await wait_until(lambda: len(hub.hub.registry.connections_of(users[-1])) == 1)
        locker = await pool.acquire()
        try:
            tx = locker.transaction()
            await tx.start()
            await locker.execute("LOCK TABLE messenger.participants IN ACCESS EXCLUSIVE MODE")
            for n, client in enumerate(clients):
                await client.send_record(watch(str(n), [users[(n + 1) % len(users)]]))

            async def waiting() -> int:
                return await pool.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%messenger.participants p%'"
                )

            await wait_until_async(waiting, SIGNAL_QUERIES)
            await asyncio.sleep(0.3)  # nothing more arrives
            assert await waiting() == SIGNAL_QUERIES
        finally:
            await tx.rollback()
            await pool.release(locker)
        answers = [await c.next_of([3], within=10) for c in clients]
        assert all(len(a["result"]) == 1 for a in answers)


async def wait_until_async(probe, expected: int, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while (await probe()) != expected:
        assert asyncio.get_running_loop().time() < deadline, await probe()
        await asyncio.sleep(0.05)
