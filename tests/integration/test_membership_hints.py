"""Membership hints on an adopter's schema: a ``realtime_membership`` notification without
``active`` makes every hub replica read the user's ``member_chats`` again (the manifest's), in
the order of the membership barrier. The trial's case: soft-deleted membership rows, a rejoin
inserting a new row, and a data fix on the old (left) row, which must not kick the member out."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import asyncpg

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.hub.backplane.sharded_publisher import ShardedRedisHubPublisher
from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.manifest.check import require_valid
from realtime_dispatch.manifest.manifest import Manifest, parse_manifest
from support.hub_wire import make_token
from tests.hub_fixtures import SlowPostgresProxy, hub_settings, raw_client, running_hub

# A Django-style membership table: one row per stint, so a user who left and came back has two
# rows for the chat; a leave sets left_at, a rejoin inserts a new row. The trigger sends the
# hint form: no row tells the whole state of (chat, user), the manifest's query does.
SCHEMA = """
CREATE SCHEMA talk;
CREATE TABLE talk.room (id uuid PRIMARY KEY, title text NOT NULL);
CREATE TABLE talk.member (
    id bigserial PRIMARY KEY,
    room_id uuid NOT NULL REFERENCES talk.room (id),
    account_id uuid NOT NULL,
    joined_at timestamptz NOT NULL DEFAULT now(),
    left_at timestamptz
);
CREATE FUNCTION talk.notify_membership() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r talk.member := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
BEGIN
    PERFORM pg_notify('realtime_membership',
        json_build_object('chatId', r.room_id, 'userId', r.account_id)::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER member_realtime AFTER INSERT OR UPDATE OR DELETE ON talk.member
    FOR EACH ROW EXECUTE FUNCTION talk.notify_membership();
"""

MANIFEST = """
-- name: member_chats
SELECT DISTINCT account_id AS user_id, room_id AS chat_id
FROM talk.member WHERE account_id = ANY($1) AND left_at IS NULL;
"""


async def adopter_manifest(pool: asyncpg.Pool) -> Manifest:
    await pool.execute(SCHEMA)
    manifest = parse_manifest(MANIFEST, "talk.sql")
    async with pool.acquire() as conn:
        await require_valid(conn, manifest, needs=("hub",))
    return manifest


async def test_a_data_fix_on_a_left_row_keeps_a_rejoined_member_on_both_replicas(
    pool: asyncpg.Pool, start_hub: Any, redis_url: str
) -> None:
    manifest = await adopter_manifest(pool)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    room = uuid.uuid4()
    await pool.execute("INSERT INTO talk.room VALUES ($1, 'deal')", room)
    first = await pool.fetchval(
        "INSERT INTO talk.member (room_id, account_id) VALUES ($1, $2) RETURNING id", room, bob
    )
    backplane = hub_settings(backplane_enabled=True, redis_url=redis_url)
    group = chat_group(room)
    async with (
        start_hub(settings=backplane, manifest=manifest) as one,
        start_hub(settings=backplane, manifest=manifest) as two,
        raw_client(one, make_token(bob)) as bob_one,
        raw_client(two, make_token(bob)) as bob_two,
    ):
        publisher = one.hub.publisher()

        async def push_and_marker(seq: int) -> list[str]:
            """Push ``seq`` to the room and a marker to Bob; what each of his clients got."""
            results = await publisher.publish(
                [Push(group, "message_received", {"seq": seq}), Push(f"user:{bob}", "marker", {})]
            )
            assert results == [None, None]
            got = []
            for client in (bob_one, bob_two):
                records = []
                while not records or records[-1]["target"] != "marker":
                    records += await client.invocations(1)
                got.append(",".join(str(r["arguments"][0].get("seq", "m")) for r in records))
            return got

        assert await push_and_marker(1) == ["1,m", "1,m"]
        # Bob leaves: the row is soft-deleted; the hint alone takes him out, before the push.
        await pool.execute("UPDATE talk.member SET left_at = now() WHERE id = $1", first)
        assert await push_and_marker(2) == ["m", "m"]
        # He rejoins: a new row.
        await pool.execute(
            "INSERT INTO talk.member (room_id, account_id) VALUES ($1, $2)", room, bob
        )
        assert await push_and_marker(3) == ["3,m", "3,m"]
        # A data fix on the old, left row (its row says "not a member"): he stays in.
        await pool.execute(
            "UPDATE talk.member SET left_at = left_at - interval '1 day' WHERE id = $1", first
        )
        assert await push_and_marker(4) == ["4,m", "4,m"]
        # Alice is hinted too but has no connection here: no query is spent on her.
        queries = one.hub.membership.hint_queries
        await pool.execute(
            "INSERT INTO talk.member (room_id, account_id) VALUES ($1, $2)", room, alice
        )
        assert await push_and_marker(5) == ["5,m", "5,m"]
        assert one.hub.membership.hint_queries == queries


async def test_a_hint_and_the_active_form_mix(pool: asyncpg.Pool, start_hub: Any) -> None:
    """``active`` keeps its meaning (the writer knows the whole state) beside hints."""
    manifest = await adopter_manifest(pool)
    bob = uuid.uuid4()
    room = uuid.uuid4()
    await pool.execute("INSERT INTO talk.room VALUES ($1, 'r')", room)
    async with (
        start_hub(manifest=manifest) as hub,
        raw_client(hub, make_token(bob)) as client,
    ):
        active = f'{{"chatId":"{room}","userId":"{bob}","active":true}}'
        await pool.execute("SELECT pg_notify('realtime_membership', $1)", active)
        [result] = await hub.hub.publisher().publish([Push(chat_group(room), "t", {"n": 1})])
        assert result is None
        assert (await client.invocations(1))[0]["arguments"] == [{"n": 1}]
        # A hint: the query (no row: not a member) is the truth.
        hint = f'{{"chatId":"{room}","userId":"{bob}"}}'
        await pool.execute("SELECT pg_notify('realtime_membership', $1)", hint)
        results = await hub.hub.publisher().publish(
            [Push(chat_group(room), "t", {"n": 2}), Push(f"user:{bob}", "t", {"n": 3})]
        )
        assert results == [None, None]
        assert (await client.invocations(1))[0]["arguments"] == [{"n": 3}]


async def test_hints_that_come_together_share_queries_and_precede_the_push(
    pool: asyncpg.Pool, start_hub: Any
) -> None:
    """Thirty connected users added to a room in one transaction: thirty hints, a few queries,
    and the push right after the commit reaches every one of them."""
    manifest = await adopter_manifest(pool)
    users = [uuid.uuid4() for _ in range(30)]
    room = uuid.uuid4()
    await pool.execute("INSERT INTO talk.room VALUES ($1, 'all')", room)
    async with (
        start_hub(manifest=manifest) as hub,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [await stack.enter_async_context(raw_client(hub, make_token(u))) for u in users]
        await pool.execute(
            "INSERT INTO talk.member (room_id, account_id) SELECT $1, unnest($2::uuid[])",
            room,
            users,
        )
        [result] = await hub.hub.publisher().publish([Push(chat_group(room), "t", {"n": 1})])
        assert result is None
        for client in clients:
            assert (await client.invocations(1))[0]["arguments"] == [{"n": 1}]
        assert 1 <= hub.hub.membership.hint_queries < len(users)


async def test_on_the_interest_routed_backplane_the_replica_acks_after_the_reread(
    database_url: str, pool: asyncpg.Pool, redis_cluster_url: str
) -> None:
    """Bob's replica reads memberships 300 ms late (its pool is behind a slow proxy): a replica
    acknowledges the worker's barrier only once its hint re-reads are applied, so it has
    subscribed to the room's channel before the push published right after the join."""
    manifest = await adopter_manifest(pool)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    room = uuid.uuid4()
    await pool.execute("INSERT INTO talk.room VALUES ($1, 'r')", room)
    settings = hub_settings(backplane="redis-cluster", redis_url=redis_cluster_url)
    options = settings.hub_options(manifest=manifest)
    async with (
        SlowPostgresProxy(database_url, delay=0.3) as slow,
        contextlib.AsyncExitStack() as stack,
    ):
        slow_pool = await asyncpg.create_pool(slow.url, min_size=1, max_size=2)
        stack.push_async_callback(slow_pool.close)
        one = await stack.enter_async_context(
            running_hub(settings, dsn=database_url, pool=pool, options=options)
        )
        two = await stack.enter_async_context(
            running_hub(settings, dsn=database_url, pool=slow_pool, options=options)
        )
        await stack.enter_async_context(raw_client(one, make_token(alice)))
        bob_two = await stack.enter_async_context(raw_client(two, make_token(bob)))
        worker = ShardedRedisHubPublisher(redis_cluster_url, dsn=database_url)
        stack.push_async_callback(worker.aclose)
        for n in range(3):
            await pool.execute(
                "INSERT INTO talk.member (room_id, account_id) VALUES ($1, $2)", room, bob
            )
            pushes = [Push(chat_group(room), "t", {"n": n}), Push(f"user:{bob}", "marker", {})]
            assert await worker.publish(pushes) == [None, None]
            records = await bob_two.invocations(2)  # two channels: in either order
            assert sorted(r["target"] for r in records) == ["marker", "t"], records
            await pool.execute(
                "UPDATE talk.member SET left_at = now() WHERE account_id = $1 AND left_at IS NULL",
                bob,
            )
            assert await worker.publish([Push(f"user:{bob}", "left", {})]) == [None]
            await bob_two.invocations(1)
