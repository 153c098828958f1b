"""Typing and presence across two hub replicas, through the backplane (one Redis, and a real
3-node Redis Cluster with its sharded channels): ``user_typing`` reaches the member on the other
replica and none of the typist's connections on either; a watcher on one replica sees a user on
the other go online and, a grace after their last connection, offline; a reconnect to the other
replica inside the grace says nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from realtime_dispatch.hub.signals.typing_signal import BLOCKED
from realtime_dispatch.messenger.blacklist import block_user
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import (
    RawClient,
    RunningHub,
    hub_settings,
    raw_client,
)
from tests.integration.chat_pairs import alice_bob_and_a_chat
from tests.integration.presence_calls import invoke


@pytest.fixture(params=["redis", "redis-cluster"])
def backplane_settings(request):
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return hub_settings(backplane_enabled=True, redis_url=url)
    url = request.getfixturevalue("redis_cluster_url")
    return hub_settings(backplane="redis-cluster", redis_url=url)


async def settled(*replicas: RunningHub) -> None:
    """Until each replica's backplane interest is settled."""
    for replica in replicas:
        assert await replica.hub.interest_settled()


async def typing_answered(client: RawClient, invocation_id: str, chat: uuid.UUID) -> None:
    """``Typing(chat)`` from ``client``, answered with a plain completion."""
    await client.send_record(invoke(invocation_id, "Typing", str(chat)))
    assert await client.next_of([3]) == {"type": 3, "invocationId": invocation_id}


async def test_typing_reaches_members_on_the_other_replica(pool, start_hub, backplane_settings):
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with (
        start_hub(settings=backplane_settings) as one,
        start_hub(settings=backplane_settings) as two,
        raw_client(one, make_token(alice)) as a1,
        raw_client(two, make_token(alice)) as a2,
        raw_client(two, make_token(bob)) as b,
    ):
        await settled(one, two)
        await typing_answered(a1, "1", chat)
        [record] = await b.invocations(1)
        assert record["target"] == "user_typing"
        assert record["arguments"][0]["userId"] == str(alice)
        await a2.assert_silent(0.3)  # the typist's connection on the other replica
        await a1.assert_silent(0.1)
        await b.assert_silent(0.2)  # once: replica one's echo of its own signal is skipped
        assert two.hub.metrics.typing.labels("received")._value.get() == 1
        assert one.hub.metrics.typing.labels("received")._value.get() == 0


async def test_typing_of_a_blocked_user_reaches_nobody_on_either_replica(
    pool, start_hub, backplane_settings
):
    """Bob (on replica two) blocks Alice (on replica one) in their 1:1 chat: her ``Typing`` on
    replica one is refused as her messages are, and nothing crosses to Bob."""
    alice, bob, chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(settings=backplane_settings, typing_interval=0.05) as one,
        start_hub(settings=backplane_settings, typing_interval=0.05) as two,
        raw_client(one, make_token(alice)) as a,
        raw_client(two, make_token(bob)) as b,
    ):
        await settled(one, two)
        await typing_answered(a, "1", chat)
        assert (await b.invocations(1))[0]["target"] == "user_typing"
        async with pool.acquire() as conn:
            await block_user(conn, owner=bob, blocked=alice)
        await asyncio.sleep(0.1)  # past the interval
        await a.send_record(invoke("2", "Typing", str(chat)))
        assert (await a.next_of([3]))["error"] == BLOCKED
        await b.assert_silent(0.5)
        assert two.hub.metrics.typing.labels("received")._value.get() == 1  # the first only


async def test_watcher_sees_a_user_on_the_other_replica(pool, start_hub, backplane_settings):
    alice, bob, _chat = await alice_bob_and_a_chat(pool, taken_part=True)
    async with (
        start_hub(settings=backplane_settings, presence_grace=0.5) as one,
        start_hub(settings=backplane_settings, presence_grace=0.5) as two,
        raw_client(one, make_token(alice)) as a,
    ):
        async with raw_client(two, make_token(bob)):
            announced = two.hub.metrics.presence.labels("online")
            await wait_until(lambda: announced._value.get() == 1)  # claimed in Redis
            await a.send_record(invoke("1", "WatchPresence", [str(bob)]))
            answer = await a.next_of([3])
            assert answer["result"] == [{"userId": str(bob), "online": True, "lastSeenAt": None}]
        # (Bob's online announcement may still be on its way: states only, no order promised
        # between an answer and an announcement made before it.)
        offline = await a.next_of([1], within=5)
        if offline["arguments"][0]["online"]:
            offline = await a.next_of([1], within=5)
        entry = offline["arguments"][0]
        assert offline["target"] == "presence_changed"
        assert (entry["userId"], entry["online"]) == (str(bob), False)
        seen = entry["lastSeenAt"]
        assert seen.endswith("Z")
        async with raw_client(two, make_token(bob)):
            [online] = await a.invocations(1, within=5)
            assert online["arguments"] == [{"userId": str(bob), "online": True, "lastSeenAt": seen}]
        # Bob's connection moves to replica one inside the grace: no flap.
        async with raw_client(one, make_token(bob)):
            await a.assert_silent(1.0)
        [offline] = await a.invocations(1, within=5)
        assert offline["arguments"][0]["online"] is False
        # A new watcher, on the other replica, reads the cluster-wide state.
        async with raw_client(two, make_token(alice)) as a2:
            await a2.send_record(invoke("2", "WatchPresence", [str(bob)]))
            [state] = (await a2.next_of([3]))["result"]
            assert state["online"] is False
            assert state["lastSeenAt"] is not None


async def test_two_replicas_racing_claims_announce_once(redis_url):
    """The store's scripts: of two replicas claiming one user at once, exactly one announces it
    online; of the two dropping their claims, exactly the last announces it offline."""
    from realtime_dispatch.hub.backplane.subscriber import redis_client
    from realtime_dispatch.hub.signals.presence_store import RedisPresenceStore

    client = redis_client(redis_url)
    try:
        one = RedisPresenceStore(client, replica_id="one", refresh=10)
        two = RedisPresenceStore(client, replica_id="two", refresh=10)
        users = [uuid.uuid4() for _ in range(200)]
        import asyncio

        first, second = await asyncio.gather(one.went_online(users), two.went_online(users))
        assert set(first) | set(second) == set(users)
        assert not set(first) & set(second)
        assert all(seen is None for seen in (first | second).values())
        assert all(online for online, _ in (await one.states(users)).values())
        assert await one.went_offline([(u, "2026-01-01T00:00:00Z") for u in users]) == []
        gone = await two.went_offline([(u, "2026-01-01T00:00:01Z") for u in users])
        assert gone == users
        states = await two.states(users)
        assert set(states.values()) == {(False, "2026-01-01T00:00:01Z")}
        again = await one.went_online(users[:1])
        assert again == {users[0]: "2026-01-01T00:00:01Z"}
    finally:
        await client.aclose()


async def test_the_users_of_a_replica_that_died_go_offline(pool, start_hub, backplane_settings):
    """Bob's only claim is a replica's that died without closing (written here as it would
    have: its claim, its set of users, a heartbeat that has just expired): the watcher first
    reads him online, then a live replica sweeps the dead one and announces him offline, with
    the dead replica's last heartbeat as lastSeenAt, once."""
    import time

    from realtime_dispatch.hub.signals.presence_store import (
        REPLICAS_KEY,
        presence_key,
        replica_users_key,
    )

    alice, bob, _chat = await alice_bob_and_a_chat(pool, taken_part=True)
    ghost = f"ghost-{uuid.uuid4().hex}"
    async with (
        start_hub(settings=backplane_settings, presence_refresh=0.2) as one,
        raw_client(one, make_token(alice)) as a,
    ):
        client = one.hub.signals.relay.client
        now = time.time()
        await client.hset(presence_key(bob), f"r:{ghost}", now + 30)
        await client.sadd(replica_users_key(ghost), str(bob))
        await client.zadd(REPLICAS_KEY, {ghost: now + 1.0})
        await a.send_record(invoke("1", "WatchPresence", [str(bob)]))
        [state] = (await a.next_of([3]))["result"]
        assert state["online"] is True
        [offline] = await a.invocations(1, within=5)
        entry = offline["arguments"][0]
        assert (entry["userId"], entry["online"]) == (str(bob), False)
        assert entry["lastSeenAt"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(now)))
        assert one.hub.metrics.presence.labels("swept")._value.get() == 1
        await a.assert_silent(0.6)  # swept once
        assert not await client.exists(replica_users_key(ghost))
        await client.delete(presence_key(bob))
