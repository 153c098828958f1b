"""Two hub replicas sharing PostgreSQL and Redis: pushes through the backplane reach clients
on both, membership changes reach both, and a Redis outage is a transient publish failure."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import httpx

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher, push_frames
from realtime_dispatch.hub.backplane.subscriber import (
    BackplaneSubscriber,
    batch_channel,
    decode_batch,
    encode_batch,
    encode_push,
    redis_client,
)
from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.messenger.commands import send_message, set_participant
from support.hub_wire import SERVICE_KEY, make_token
from support.procs import free_port
from tests.hub_fixtures import hub_settings, raw_client
from tests.integration.chat_pairs import alice_bob_and_a_chat


def backplane_settings(redis_url):
    return hub_settings(backplane_enabled=True, redis_url=redis_url)


async def test_two_replicas_each_client_receives_a_chat_message(pool, start_hub, redis_url):
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with (
        start_hub(settings=backplane_settings(redis_url)) as one,
        start_hub(settings=backplane_settings(redis_url)) as two,
        raw_client(one, make_token(alice)) as on_one,
        raw_client(two, make_token(bob)) as on_two,
    ):
        # The worker's side: a publisher of its own, as `realtime-dispatch worker` builds it.
        worker = RedisHubPublisher(redis_url)
        try:
            async with pool.acquire() as conn:
                sent = await send_message(conn, chat_id=chat, sender=alice, body="hi")
            payload = {"chatId": str(chat), "messageId": str(sent.message_id), "seq": sent.seq}
            [result] = await worker.publish([Push(chat_group(chat), "message_received", payload)])
            assert result is None
        finally:
            await worker.aclose()
        for client in (on_one, on_two):
            [record] = await client.invocations(1)
            assert record == {"type": 1, "target": "message_received", "arguments": [payload]}


async def test_membership_changes_across_replicas(pool, start_hub, redis_url):
    _alice, bob, chat = await alice_bob_and_a_chat(pool, bob_member=False)
    async with (
        start_hub(settings=backplane_settings(redis_url)) as one,
        start_hub(settings=backplane_settings(redis_url)) as two,
        raw_client(one, make_token(bob)) as bob_one,
        raw_client(two, make_token(bob)) as bob_two,
    ):
        publisher = one.hub.publisher()
        group = chat_group(chat)
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=True)
        assert await publisher.publish([Push(group, "message_received", {"seq": 1})]) == [None]
        for client in (bob_one, bob_two):
            assert (await client.invocations(1))[0]["arguments"] == [{"seq": 1}]
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=False)
        await publisher.publish(
            [Push(group, "message_received", {"seq": 2}), Push(f"user:{bob}", "marker", {})]
        )
        for client in (bob_one, bob_two):
            assert (await client.invocations(1))[0]["target"] == "marker"


async def publish_two_then_close(publisher: RedisHubPublisher) -> list[object]:
    """A chat push and a user push published; the results, once the publisher is closed."""
    try:
        return list(
            await publisher.publish(
                [Push("chat:x", "message_received", {}), Push("user:y", "contact_added", {})]
            )
        )
    finally:
        await publisher.aclose()


async def test_redis_outage_is_transient():
    publisher = RedisHubPublisher(f"redis://127.0.0.1:{free_port()}/0")
    results = await publish_two_then_close(publisher)
    assert len(results) == 2
    assert all(isinstance(r, HubUnavailable) for r in results)


async def test_publish_that_no_replica_receives_is_transient(redis_url):
    """With no hub replica subscribed (all down, or re-subscribing after a Redis restart) nobody
    can deliver: the rows must be retried, not marked Done, every push the message carried."""
    publisher = RedisHubPublisher(redis_url, channel=f"realtime-dispatch:test:{free_port()}")
    results = await publish_two_then_close(publisher)
    assert len(results) == 2
    assert all(isinstance(r, HubUnavailable) and r.code == "NoSubscribers" for r in results)


async def test_a_batch_is_one_message_unless_an_older_replica_listens(redis_url):
    """A replica of this version reads both formats; one of an older version reads format 1
    only. While one listens, the publisher sends a message per push, and both replicas get each
    push once."""
    channel = f"realtime-dispatch:test:{free_port()}"
    delivered: list[tuple[str, bytes]] = []
    arrived = asyncio.Condition()

    async def deliver(items, _marks=()):
        async with arrived:
            delivered.extend(items)
            arrived.notify_all()

    async def delivered_count(n):
        async with arrived:
            await asyncio.wait_for(arrived.wait_for(lambda: len(delivered) >= n), 10)

    replica = BackplaneSubscriber(redis_url, deliver, channel=channel)
    replica_task = asyncio.create_task(replica.run())
    spy_client, older_client = redis_client(redis_url), redis_client(redis_url)
    spy = spy_client.pubsub()  # a pattern: not counted by PUBSUB NUMSUB
    older = older_client.pubsub()
    publisher = RedisHubPublisher(redis_url, channel=channel, format_check_every=0)

    async def next_message(pubsub, kinds=("message", "pmessage")):
        async with asyncio.timeout(10):
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None and message["type"] in kinds:
                    return message["channel"].decode(), message["data"]

    try:
        await asyncio.wait_for(replica.ready.wait(), 10)
        await spy.psubscribe(f"{channel}*")
        await next_message(spy, ("psubscribe",))
        first = [
            Push("chat:a", "t", {"n": 1}),
            Push("user:b", "t", {"n": 2}),
            Push("chat:a", "t", {}),
        ]
        assert await publisher.publish(first) == [None] * 3
        frames = push_frames(first)
        assert await next_message(spy) == (batch_channel(channel), encode_batch(frames))
        await delivered_count(3)
        assert delivered == frames

        await older.subscribe(channel)
        await next_message(older, ("subscribe",))
        second = [Push("chat:a", "t", {"n": 4}), Push("user:b", "t", {"n": 5})]
        assert await publisher.publish(second) == [None] * 2
        frames = push_frames(second)
        for group, frame in frames:
            assert await next_message(spy) == (channel, encode_push(group, frame))
            assert await next_message(older) == (channel, encode_push(group, frame))
        await delivered_count(5)
        assert delivered[3:] == frames
    finally:
        await publisher.aclose()
        replica_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await replica_task
        for pubsub in (spy, older):
            await pubsub.aclose()
        for client in (spy_client, older_client):
            await client.aclose()


def test_batch_message_format():
    items = [("chat:é", '{"x":"ü"}\x1e'.encode()), ("user:1", b"\n\n5\n")]
    assert decode_batch(encode_batch(items)) == items
    for bad in (b"g\n3\nab", b"g\nx\nabc", b"\n1\na", b"g\n2\n\xfe\xff", b"g\n0\n", b"g"):
        assert decode_batch(bad) is None, bad
    # A signal's envelope (its first byte 0xff, never UTF-8) is passed on, to be opened and
    # checked by the hub's signals (never relayed to a client as it is).
    assert decode_batch(b"g\n2\n\xff\xfe") == [("g", b"\xff\xfe")]


async def test_an_http_batch_to_one_replica_reaches_the_members_on_both(pool, start_hub, redis_url):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    auth = {"Authorization": f"Bearer {SERVICE_KEY}"}
    pushes = [
        {"group": f"user:{alice}", "target": "one", "arguments": [1]},
        {"group": f"user:{bob}", "target": "two", "arguments": [2]},
        {"group": "", "target": "t", "arguments": []},
        {"group": f"user:{alice}", "target": "three", "arguments": [3]},
    ]
    async with (
        start_hub(settings=backplane_settings(redis_url)) as one,
        start_hub(settings=backplane_settings(redis_url)) as two,
        raw_client(one, make_token(alice)) as on_one,
        raw_client(two, make_token(bob)) as on_two,
        httpx.AsyncClient(base_url=one.http_url, headers=auth) as http,
    ):
        response = await http.post("/api/v1/hubs/messenger/batch", json={"pushes": pushes})
        assert [r["status"] for r in response.json()["results"]] == [202, 202, 400, 202]
        assert [r["target"] for r in await on_one.invocations(2)] == ["one", "three"]
        assert [r["target"] for r in await on_two.invocations(1)] == ["two"]
