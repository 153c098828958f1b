"""The interest-routed backplane on a real 3-node Redis Cluster: each hub replica receives only
the pushes of groups it has members of; joins and removals apply before the next push; a push
that no replica receives is retried only when no replica is alive."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.backplane.sharded_publisher import ShardedRedisHubPublisher
from realtime_dispatch.hub.connections.registry import chat_group, user_group
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import SlowPostgresProxy, hub_settings, options_for, raw_client, running_hub
from tests.integration.chat_pairs import alice_bob_and_a_chat


def cluster_settings(url: str):
    return hub_settings(backplane="redis-cluster", redis_url=url)


def received_from_backplane(running) -> float:
    return running.hub.metrics.pushes.labels("backplane")._value.get()


async def test_each_replica_receives_only_the_pushes_of_its_members(
    database_url, pool, redis_cluster_url
):
    users = [uuid.uuid4() for _ in range(3)]
    async with pool.acquire() as conn:
        own = [await create_chat(conn, creator=u, title="own") for u in users]
        shared = await create_chat(conn, creator=users[1], title="shared", members=[users[2]])
    settings = cluster_settings(redis_cluster_url)
    # A handshake waits for its groups' shard subscriptions (up to the barrier timeout, then it
    # is refused); three replicas' first subscriptions on a saturated machine can take longer
    # than the 2 s default, and the routing is what this test is about.
    options = options_for(settings, barrier_timeout=10.0)
    async with AsyncExitStack() as stack:
        hubs = [
            await stack.enter_async_context(
                running_hub(settings, dsn=database_url, pool=pool, options=options)
            )
            for _ in users
        ]
        clients = [
            await stack.enter_async_context(raw_client(h, make_token(u)))
            for h, u in zip(hubs, users, strict=True)
        ]
        worker = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
        stack.push_async_callback(worker.aclose)
        rounds = 5
        for n in range(rounds):
            pushes = [Push(chat_group(c), "message_received", {"seq": n}) for c in own]
            pushes.append(Push(chat_group(shared), "message_received", {"seq": n, "shared": 1}))
            assert await worker.publish(pushes) == [None] * 4
        expected = [rounds, 2 * rounds, 2 * rounds]  # the shared chat has members on 1 and 2
        for client, count in zip(clients, expected, strict=True):
            assert len(await client.invocations(count)) == count
        await wait_until(lambda: [received_from_backplane(h) for h in hubs] == expected, within=5)
        # Nothing beyond: replica 0 never saw the shared chat nor the others' own chats.
        assert [received_from_backplane(h) for h in hubs] == expected


async def test_a_join_applies_before_the_next_push(database_url, pool, redis_cluster_url):
    """Bob's replica hears of membership changes 300 ms late (its LISTEN connection is behind a
    slow proxy), so it subscribes to a new chat long after the join commits. The publisher
    still waits for it: the push published right after the join reaches Bob."""
    alice, bob = uuid.uuid4(), uuid.uuid4()
    settings = cluster_settings(redis_cluster_url)
    async with (
        SlowPostgresProxy(database_url, delay=0.3) as slow,
        running_hub(settings, dsn=database_url, pool=pool) as one,
        running_hub(settings, dsn=slow.url, pool=pool) as two,
        raw_client(one, make_token(alice)),
        raw_client(two, make_token(bob)) as bob_two,
    ):
        worker = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
        try:
            for n in range(5):
                async with pool.acquire() as conn:
                    chat = await create_chat(conn, creator=alice, title=f"c{n}")
                    await set_participant(conn, chat_id=chat, user_id=bob, active=True)
                # Published at once: bob's replica must have subscribed to the new chat first.
                push = Push(chat_group(chat), "message_received", {"chatId": str(chat)})
                assert await worker.publish([push]) == [None]
                [record] = await bob_two.invocations(1)
                assert record["arguments"] == [{"chatId": str(chat)}]
        finally:
            await worker.aclose()


async def test_a_removed_member_receives_nothing_more(database_url, pool, redis_cluster_url):
    _alice, bob, chat = await alice_bob_and_a_chat(pool)
    settings = cluster_settings(redis_cluster_url)
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as one,
        raw_client(one, make_token(bob)) as bob_one,
    ):
        worker = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
        try:
            async with pool.acquire() as conn:
                await set_participant(conn, chat_id=chat, user_id=bob, active=False)
            await worker.publish(
                [
                    Push(chat_group(chat), "message_received", {"seq": 1}),
                    Push(user_group(bob), "marker", {}),
                ]
            )
            [record] = await bob_one.invocations(1)
            assert record["target"] == "marker"
        finally:
            await worker.aclose()


async def test_no_member_anywhere_is_done_and_no_replica_is_transient(
    database_url, pool, redis_cluster_url
):
    nobody = Push(chat_group(uuid.uuid4()), "message_received", {"seq": 1})
    worker = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
    try:
        settings = cluster_settings(redis_cluster_url)
        async with running_hub(settings, dsn=database_url, pool=pool) as one:
            await wait_until(one.hub.backplane.ready.is_set, within=5)
            # A replica is alive, nobody of the group is connected anywhere: done, not an error.
            assert await worker.publish([nobody]) == [None]
        # The only replica has stopped (and withdrawn its heartbeat): retry later.
        worker_after = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
        try:
            [result] = await worker_after.publish([nobody])
        finally:
            await worker_after.aclose()
        assert isinstance(result, HubUnavailable)
        assert result.code == "NoSubscribers"
    finally:
        await worker.aclose()
