"""Two hub replicas sharing PostgreSQL and Redis: pushes through the backplane reach clients
on both, membership changes reach both, and a Redis outage is a transient publish failure."""

from __future__ import annotations

import uuid

from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.publishers import RedisHubPublisher
from realtime_dispatch.hub.registry import chat_group
from realtime_dispatch.messenger.commands import create_chat, send_message, set_participant
from realtime_dispatch.push import Push
from tests.conftest import free_port
from tests.hub_fixtures import hub_settings, make_token, raw_client, running_hub


def backplane_settings(redis_url):
    return hub_settings(backplane_enabled=True, redis_url=redis_url)


async def test_two_replicas_each_client_receives_a_chat_message(database_url, pool, redis_url):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t", members=[bob])
    settings = backplane_settings(redis_url)
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as one,
        running_hub(settings, dsn=database_url, pool=pool) as two,
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


async def test_membership_changes_across_replicas(database_url, pool, redis_url):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t")
    settings = backplane_settings(redis_url)
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as one,
        running_hub(settings, dsn=database_url, pool=pool) as two,
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


async def test_redis_outage_is_transient():
    publisher = RedisHubPublisher(f"redis://127.0.0.1:{free_port()}/0")
    try:
        results = await publisher.publish(
            [Push("chat:x", "message_received", {}), Push("user:y", "contact_added", {})]
        )
    finally:
        await publisher.aclose()
    assert len(results) == 2
    assert all(isinstance(r, HubUnavailable) for r in results)


async def test_publish_that_no_replica_receives_is_transient(redis_url):
    """With no hub replica subscribed (all down, or re-subscribing after a Redis restart) nobody
    can deliver: the rows must be retried, not marked Done."""
    publisher = RedisHubPublisher(redis_url, channel=f"realtime-dispatch:test:{free_port()}")
    try:
        [result] = await publisher.publish([Push("chat:x", "message_received", {})])
    finally:
        await publisher.aclose()
    assert isinstance(result, HubUnavailable)
    assert result.code == "NoSubscribers"
