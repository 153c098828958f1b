"""``hub --workers 2``: the real command, the official ``@microsoft/signalr`` client (Node) on
every transport, members spread over both workers, one push reaching them all, the per-user
cap for the whole replica, a request of one worker's connection sent on another worker's
keep-alive connection, the replica's ``/readyz`` and ``/metrics``, a worker killed,
restarted, its clients back, presence, typing and a revocation across the workers, and
``serve --workers 2`` running its dispatcher once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from realtime_dispatch.cli.workers import user_worker
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.hub.connections.registry import chat_group, user_group
from realtime_dispatch.messenger.commands import create_chat, set_participant
from realtime_dispatch.messenger.messages import send_message
from support.hub_wire import SECRET, SERVICE_KEY, make_token
from support.procs import cli_env, free_port, run_cli, running, wait_until
from tests.hub_fixtures import NodeClient

pytestmark = pytest.mark.e2e

WORKERS = 2
CAP = 2


def users_on(worker: int, count: int) -> list[uuid.UUID]:
    """``count`` users whose connections the parent sends to ``worker``."""
    found: list[uuid.UUID] = []
    while len(found) < count:
        user = uuid.uuid4()
        if user_worker(str(user), WORKERS) == worker:
            found.append(user)
    return found


@contextlib.asynccontextmanager
async def hub_workers(database_url: str, command: str = "hub") -> AsyncIterator[tuple[str, int]]:
    """``hub --workers 2`` (no backplane configured: its own redis-server); its URL and pid."""
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_HUB_MAX_CONNECTIONS_PER_USER=str(CAP),
        REALTIME_LOG_LEVEL="warning",
    )
    args = (command, "--workers", str(WORKERS), "--port", str(port))
    async with running(*args, env=env, ready=f"{command} workers on".encode()) as proc:
        url = f"http://127.0.0.1:{port}"
        await ready(url, within=60)
        yield url, proc.pid


async def ready(url: str, within: float) -> None:
    async with httpx.AsyncClient(base_url=url) as http, asyncio.timeout(within):
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await http.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)


def worker_pids(parent: int) -> dict[int, int]:
    """The parent's workers: index -> pid (from their environment)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    found = {}
    for pid in map(int, children):
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            for entry in environ:
                if entry.startswith(b"REALTIME_HUB_WORKER_INDEX="):
                    found[int(entry.split(b"=", 1)[1])] = pid
    return found


async def started(client: NodeClient) -> str:
    event = await client.event(within=30)
    assert event["event"] == "started", event
    return str(event["connectionId"])


async def message(client: NodeClient, within: float = 15) -> dict:
    event = await client.event(within=within)
    assert event["event"] == "message", event
    return event


async def test_official_client_on_each_transport_spread_over_both_workers(database_url, pool):
    async with hub_workers(database_url) as (url, _):
        publisher = HttpHubPublisher(url, SERVICE_KEY)
        try:
            for transport in ("WebSockets", "ServerSentEvents", "LongPolling"):
                await spread_over_both(url, pool, publisher, transport)
        finally:
            await publisher.aclose()


async def spread_over_both(url: str, pool, publisher: HttpHubPublisher, transport: str) -> None:
    members = [*users_on(0, 2), *users_on(1, 2)]
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=members[0], title=transport)
        for user in members[1:]:
            await set_participant(conn, chat_id=chat, user_id=user, active=True)
    clients = [
        await NodeClient.start(
            f"{url}/hubs/messenger",
            make_token(user),
            targets=["message_received"],
            transport=transport,
        )
        for user in members
    ]
    try:
        ids = [await started(c) for c in clients]
        # Each connection on its user's worker: the token it negotiated names it.
        assert [i.split(".")[0] for i in ids] == ["w0", "w0", "w1", "w1"], transport
        # One push through one worker's push endpoint reaches the members on both.
        pushed = Push(chat_group(chat), "message_received", {"n": transport})
        assert await publisher.publish([pushed]) == [None]
        for client in clients:
            assert (await message(client))["args"] == [{"n": transport}]
        # A push to one user reaches that user only.
        pushes = [Push(user_group(u), "message_received", {"to": str(u)}) for u in members]
        assert await publisher.publish(pushes) == [None] * len(members)
        for user, client in zip(members, clients, strict=True):
            assert (await message(client))["args"] == [{"to": str(user)}]
    finally:
        for client in clients:
            await client.stop()


async def test_cap_metrics_forwarding_and_a_killed_worker(database_url, pool):
    [alice] = users_on(0, 1)
    bob, carol = users_on(1, 2)
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t")
        await set_participant(conn, chat_id=chat, user_id=bob, active=True)
        # bob takes part (the consent rule of presence: docs/hub.md), so alice may watch him
        await send_message(conn, chat_id=chat, sender=bob, body="hi")
    async with hub_workers(database_url) as (url, parent):
        hub = f"{url}/hubs/messenger"
        # The per-user cap holds for the replica: a third connection of bob's is refused.
        bobs = [
            await NodeClient.start(
                hub, make_token(bob), targets=["message_received", "user_typing"], reconnect=True
            )
            for _ in range(CAP)
        ]
        alices = [await NodeClient.start(hub, make_token(alice), targets=["message_received"])]
        publisher = HttpHubPublisher(url, SERVICE_KEY)
        try:
            for client in bobs:
                assert (await started(client)).startswith("w1.")
            assert (await started(alices[0])).startswith("w0.")
            third = await NodeClient.start(hub, make_token(bob))
            try:
                refused = await third.event(within=30)
                assert refused["event"] == "start_failed", refused
                assert "Status code '429'" in refused["error"], refused
            finally:
                await third.stop()

            # One /metrics and one /readyz for the replica.
            async with httpx.AsyncClient(base_url=url) as http:
                page = (await http.get("/metrics")).text
                assert 'state="open",worker="0"} 1.0' in page
                assert f'state="open",worker="1"}} {float(CAP)}' in page
                assert (await http.get("/readyz")).status_code == 200

            await forwarded_long_poll(url, alice, carol)

            # Worker 1 (bob's) killed: it is started again and bob's clients come back.
            before = worker_pids(parent)
            os.kill(before[1], signal.SIGKILL)
            for client in bobs:
                assert (await client.event(within=30))["event"] == "reconnecting"
            for client in bobs:
                assert (await client.event(within=60))["event"] == "reconnected"
            await wait_until(lambda: worker_pids(parent).get(1) not in {None, before[1]}, 30)
            await ready(url, within=60)
            assert worker_pids(parent)[0] == before[0]
            [result] = await publisher.publish(
                [Push(chat_group(chat), "message_received", {"n": 2})]
            )
            assert result is None
            for client in [*bobs, *alices]:
                assert (await message(client))["args"] == [{"n": 2}]

            # Presence and typing across the workers (alice on worker 0, bob on worker 1).
            [watcher] = alices
            await watcher.send({"invoke": "WatchPresence", "args": [[str(bob)]]})
            answer = await watcher.event(within=15)
            assert answer["event"] == "invoked", answer
            assert [(s["userId"], s["online"]) for s in answer["result"]] == [(str(bob), True)]
            await watcher.send({"invoke": "Typing", "args": [str(chat)]})
            assert await watcher.event(within=15) == {"event": "invoked"}
            for client in bobs:
                typing = await message(client)
                assert typing["target"] == "user_typing"
                assert typing["args"][0]["userId"] == str(alice)

            # A revocation reaches the worker bob is on: his connections are cut, his token
            # refused.
            env = cli_env(REALTIME_DATABASE_URL=database_url)
            revoked = await asyncio.to_thread(run_cli, "revoke", "--user", str(bob), env=env)
            assert revoked.returncode == 0, revoked.stderr
            for client in bobs:
                cut = await client.event(within=30)
                assert cut["event"] in {"reconnecting", "closed"}, cut
            async with httpx.AsyncClient(base_url=url) as http:
                refused = await http.post(
                    "/hubs/messenger/negotiate",
                    params={"negotiateVersion": "1"},
                    headers={"Authorization": f"Bearer {make_token(bob, ttl=200)}"},
                )
            assert refused.status_code == 401, refused.text
        finally:
            await publisher.aclose()
            for client in [*bobs, *alices]:
                await client.stop()


async def forwarded_long_poll(url: str, first: uuid.UUID, second: uuid.UUID) -> None:
    """One keep-alive connection, given to ``first``'s worker by its first request, then used
    for a long-polling connection of ``second``'s worker: its requests are forwarded there."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:
        hub = "/hubs/messenger"
        params = {"negotiateVersion": "1"}
        mine = {"Authorization": f"Bearer {make_token(first)}"}
        assert (await http.post(f"{hub}/negotiate", params=params, headers=mine)).status_code == 200
        # The same connection now negotiates for ``second``: that request went to ``first``'s
        # worker, so the token names it; the parent routes by the first request only.
        theirs = {"Authorization": f"Bearer {make_token(second)}"}
        other = httpx.AsyncClient(base_url=url, timeout=30)
        try:
            negotiated = (
                await other.post(f"{hub}/negotiate", params=params, headers=theirs)
            ).json()
        finally:
            await other.aclose()
        token = negotiated["connectionToken"]
        assert token.startswith(f"w{user_worker(str(second), WORKERS)}.")
        assert user_worker(str(first), WORKERS) != user_worker(str(second), WORKERS)
        # The long poll of ``second``'s connection on ``first``'s worker's keep-alive connection.
        opened = await http.get(hub, params={"id": token}, headers=theirs)  # the first poll
        assert opened.status_code == 200, opened.text
        handshake = orjson.dumps({"protocol": "json", "version": 1}) + b"\x1e"
        sent = await http.post(hub, params={"id": token}, headers=theirs, content=handshake)
        assert sent.status_code == 200, sent.text
        polled = await http.get(hub, params={"id": token}, headers=theirs)
        assert polled.status_code == 200
        assert polled.content.startswith(b"{}\x1e"), polled.content
        assert (await http.delete(hub, params={"id": token}, headers=theirs)).status_code in {
            200,
            202,
            204,
        }


async def test_serve_runs_its_dispatcher_once_and_its_pushes_reach_both_workers(database_url, pool):
    [alice] = users_on(0, 1)
    [bob] = users_on(1, 1)
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t")
        await set_participant(conn, chat_id=chat, user_id=bob, active=True)
    async with hub_workers(database_url, "serve") as (url, _):
        hub = f"{url}/hubs/messenger"
        clients = [
            await NodeClient.start(hub, make_token(user), targets=["message_received"])
            for user in (alice, bob)
        ]
        try:
            ids = [await started(client) for client in clients]
            assert [i.split(".")[0] for i in ids] == ["w0", "w1"]
            async with pool.acquire() as conn:
                sent = await send_message(conn, chat_id=chat, sender=alice, body="hello")
            for client in clients:
                [payload] = (await message(client, within=30))["args"]
                assert payload["messageId"] == str(sent.message_id)
            async with httpx.AsyncClient(base_url=url) as http:
                page = (await http.get("/metrics")).text
            # The dispatcher's metrics come from worker 0 alone: it runs there only.
            dispatched = [
                line
                for line in page.splitlines()
                if line.startswith("messenger_realtime_dispatched_total{")
            ]
            assert dispatched, page[:2000]
            assert all('worker="0"' in line for line in dispatched), dispatched
        finally:
            for client in clients:
                await client.stop()
