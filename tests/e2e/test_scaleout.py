"""Scale-out through real processes: two ``realtime-dispatch hub`` replicas behind the Redis
backplane and a separate ``realtime-dispatch worker``. A member connected to each replica receives
the chat message; a member removed meanwhile receives nothing more."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import uuid4

import asyncpg
import httpx

from realtime_dispatch.messenger import commands
from support.hub_wire import SECRET, make_token
from support.procs import cli_env, free_port, start_cli, stop, wait_for_line, wait_until
from tests.hub_fixtures import raw_client
from tests.integration.support import send


@dataclass
class HubProcess:
    port: int
    process: asyncio.subprocess.Process

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/hubs/messenger"


@contextlib.asynccontextmanager
async def hub_process(env: dict[str, str]) -> AsyncIterator[HubProcess]:
    port = free_port()
    proc = await start_cli("hub", "--port", str(port), env=env)
    replica = HubProcess(port, proc)
    try:

        async def ready() -> bool:
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"{replica.http_url}/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(ready, within=30)
        yield replica
    finally:
        assert await stop(proc) == 0


async def test_two_replicas_redis_and_a_separate_worker(
    pool: asyncpg.Pool, database_url: str, redis_url: str
) -> None:
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_BACKPLANE_ENABLED="true",
        REALTIME_REDIS_URL=redis_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
    )
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="t", members=[bob, carol])
    async with (
        hub_process(env) as one,
        hub_process(env) as two,
        raw_client(one, make_token(bob)) as bob_client,  # type: ignore[arg-type]
        raw_client(two, make_token(carol)) as carol_client,  # type: ignore[arg-type]
    ):
        worker = await start_cli("worker", env=env)
        try:
            sent = await send(pool, chat, alice, "to both replicas")
            for client in (bob_client, carol_client):
                # The chat's creation, pending until the worker started, then the message.
                created, event = await client.invocations(2, within=20)
                assert created["target"] == "chat_updated"
                assert created["arguments"][0]["eventKind"] == "ChatCreated"
                assert event["target"] == "message_received"
                assert event["arguments"][0]["messageId"] == str(sent.message_id)
                assert event["arguments"][0]["body"] == "to both replicas"

            async with pool.acquire() as conn:
                await commands.set_participant(conn, chat_id=chat, user_id=carol, active=False)
            await send(pool, chat, alice, "only bob")
            # The removal is pushed to the remaining members (chat_updated), then the message.
            removed, event = await bob_client.invocations(2, within=20)
            assert removed["target"] == "chat_updated"
            assert removed["arguments"][0]["eventKind"] == "MemberRemoved"
            assert removed["arguments"][0]["subjectUserId"] == str(carol)
            assert event["arguments"][0]["body"] == "only bob"
            await carol_client.assert_silent(1.0)
        finally:
            assert await stop(worker) == 0


async def test_worker_pushes_to_a_hub_process_over_http(
    pool: asyncpg.Pool, database_url: str
) -> None:
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY="svc-key-for-http",
        REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
    )
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="t", members=[bob])
    async with (
        hub_process(env) as hub,
        raw_client(hub, make_token(bob)) as bob_client,  # type: ignore[arg-type]
    ):
        worker = await start_cli("worker", env={**env, "REALTIME_HUB_URL": hub.http_url})
        try:
            sent = await send(pool, chat, alice, "over http")
            created, event = await bob_client.invocations(2, within=20)
            assert (created["target"], created["arguments"][0]["chatId"]) == (
                "chat_updated",
                str(chat),
            )
            assert event["target"] == "message_received"
            assert event["arguments"][0]["seq"] == sent.seq
        finally:
            assert await stop(worker) == 0


async def test_three_replicas_on_a_redis_cluster_and_two_workers(
    pool: asyncpg.Pool, database_url: str, redis_cluster_url: str
) -> None:
    """The interest-routed backplane through real processes: three ``hub`` replicas and two
    ``worker``s sharing four partitions, on a 3-node Redis Cluster. Each chat's message reaches
    its members wherever they are connected, a member added meanwhile receives the next message,
    and each replica reads only the pushes of its own members."""
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_BACKPLANE="redis-cluster",
        REALTIME_REDIS_URL=redis_cluster_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
        REALTIME_DISPATCH_PARTITIONS="4",
    )
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        ab = await commands.create_chat(conn, creator=alice, title="ab", members=[bob])
        alone = await commands.create_chat(conn, creator=carol, title="carol alone")
    async with (
        hub_process(env) as one,
        hub_process(env) as two,
        hub_process(env) as three,
        raw_client(one, make_token(alice)) as alice_client,  # type: ignore[arg-type]
        raw_client(two, make_token(bob)) as bob_client,  # type: ignore[arg-type]
        raw_client(three, make_token(carol)) as carol_client,  # type: ignore[arg-type]
    ):
        workers = [await start_cli("worker", env=env) for _ in range(2)]
        try:
            for worker in workers:  # both up (their SIGTERM handled) before anything is sent
                await wait_for_line(worker, b"dispatcher_connected", within=60)
            # The two chats' creations (pending until the workers started), to their members.
            for client, chat in ((alice_client, ab), (bob_client, ab), (carol_client, alone)):
                [created] = await client.invocations(1, within=20)
                assert created["target"] == "chat_updated"
                assert created["arguments"][0]["eventKind"] == "ChatCreated"
                assert created["arguments"][0]["chatId"] == str(chat)
            sent = await send(pool, ab, alice, "alice to bob")
            for client in (alice_client, bob_client):
                [event] = await client.invocations(1, within=20)
                assert event["arguments"][0]["messageId"] == str(sent.message_id)
            await send(pool, alone, carol, "carol's own")
            [event] = await carol_client.invocations(1, within=20)
            assert event["arguments"][0]["body"] == "carol's own"

            async with pool.acquire() as conn:
                await commands.set_participant(conn, chat_id=alone, user_id=bob, active=True)
            await send(pool, alone, carol, "bob is in")
            added, message = await bob_client.invocations(2, within=20)
            assert added["arguments"][0]["eventKind"] == "MemberAdded"
            assert message["arguments"][0]["body"] == "bob is in"
            await alice_client.assert_silent(0.5)

            # Each replica read only its members' pushes: replica one (alice) nothing of
            # carol's chat, replica three (carol) nothing of alice and bob's.
            async with httpx.AsyncClient() as http:
                counts = [
                    _backplane_pushes((await http.get(f"{h.http_url}/metrics")).text)
                    for h in (one, two, three)
                ]
            assert counts == [2, 4, 4]  # each with its chat's creation
        finally:
            for worker in workers:
                assert await stop(worker) == 0


def _backplane_pushes(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("messenger_realtime_hub_pushes_total") and 'source="backplane"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
