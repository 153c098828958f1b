"""Resume on an adopter's schema, through real processes: ``examples/own-schema`` with its
``member_spans``, ``hub`` killed (``SIGKILL``) while rows are written and marked Done (delivered
to nobody, as when a worker's retry lands before the clients reconnect), then restarted. Both
SDKs, as an application without the reference REST API uses them (their own resync hook),
resume through ``GET /api/sync`` and get the missed message and the user-targeted call invite;
the TypeScript SDK over each transport. Past what the outbox retains the hook is told
``limited``; on a hub whose manifest has no ``member_spans`` it is told ``sync_off``. Neither
SDK calls a route of the reference REST API."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import pytest
import structlog

from realtime_dispatch.client import MessengerClient, ResyncReason
from realtime_dispatch.client.client import ClientOptions
from realtime_dispatch.client.connection import ConnectionOptions
from realtime_dispatch.contracts.calls import CallInvited
from realtime_dispatch.contracts.messages import MessageReceived
from support.hub_wire import SECRET, SERVICE_KEY, make_token
from support.procs import (
    LogTail,
    cli_env,
    free_port,
    run_cli,
    start_cli,
    stop,
    wait_for_line,
    wait_ready,
    wait_until,
)
from tests.e2e.browser import TARGETS, build_sdk, sdk_client
from tests.e2e.own_schema import EXAMPLE, WRITES
from tests.hub_fixtures import NodeClient

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TRANSPORTS = ("WebSockets", "ServerSentEvents", "LongPolling")
# The official client's transport classes, as the driver reports the one a connection is on.
TRANSPORT_CLASSES = {
    "WebSockets": "WebSocketTransport",
    "ServerSentEvents": "ServerSentEventsTransport",
    "LongPolling": "LongPollingTransport",
}
JITSI_SECRET = "jitsi-app-secret-of-the-adopter-32-bytes!"
QUICK = ClientOptions(connection=ConnectionOptions(reconnect_base=0.05, reconnect_cap=0.3))
# What the Python SDK logs when it calls reference routes a hub on an own schema does not have.
REFERENCE_ROUTE_FAILURES = {
    "client_sync_unavailable",
    "client_resync_refused",
    "client_chat_list_failed",
    "client_resync_failed",
}


class Hub:
    """``hub`` as a process on a fixed port, killed and started again by the test."""

    def __init__(self, env: dict[str, str], port: int) -> None:
        self.env = env
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None
        self._logs: LogTail | None = None

    async def start(self, **env: str) -> None:
        self.proc = await start_cli("hub", "--port", str(self.port), env={**self.env, **env})
        await wait_for_line(self.proc, b"listening on")
        self._logs = LogTail(self.proc)  # so that a full pipe never stalls the hub
        await wait_ready(self.proc, f"http://127.0.0.1:{self.port}")

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await self.proc.wait()
        await self._stopped()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await stop(self.proc, signal.SIGTERM, logs=self._logs)
        await self._stopped()

    async def _stopped(self) -> None:
        if self._logs is not None:
            await self._logs.finished()
            self._logs = None


async def next_of(client: NodeClient, kind: str, within: float = 30) -> dict[str, Any]:
    """The client's next line of ``kind`` (``message`` lines are compared by the caller)."""
    while True:
        event = await client.event(within=within)
        if event["event"] == kind:
            return event
        assert event["event"] in {"message", "resync", "resumed", "started"}, event


async def received(client: NodeClient, n: int) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for _ in range(n):
        event = await next_of(client, "message")
        found.append((event["target"], event["args"][0]))
    return found


@contextlib.asynccontextmanager
async def node_clients(url: str, user: UUID) -> AsyncIterator[dict[str, NodeClient]]:
    clients = {t: await sdk_client(url, user, t) for t in TRANSPORTS}
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.stop()


async def _post(conn: asyncpg.Connection, chat: UUID, author: UUID, text: str) -> UUID:
    post = uuid4()
    async with conn.transaction():
        number = await conn.fetchval(WRITES["next_number"], chat)
        await conn.execute(WRITES["insert_post"], post, chat, number, author, text)
        await conn.execute(WRITES["outbox_message_received"], chat, post, number)
    return post


async def test_both_sdks_resume_through_sync_on_an_own_schema(
    empty_database: str,
    tmp_path: Path,
) -> None:
    build_sdk()
    url = empty_database
    conn = await asyncpg.connect(url)
    env = cli_env(REALTIME_DATABASE_URL=url, REALTIME_PROJECTIONS=str(EXAMPLE / "projections.sql"))
    try:
        await conn.execute((EXAMPLE / "schema.sql").read_text())
        printed = run_cli("migrate", "--print-sql", "--only", "outbox", env=env)
        await conn.execute(printed.stdout)
        checked = run_cli("check", env=env)
        assert "member_spans: ok" in checked.stdout.splitlines(), checked.stdout
        alice, bob = uuid4(), uuid4()
        chat = uuid4()
        async with conn.transaction():
            await conn.execute(WRITES["create_conversation"], chat, "resume")
            for user in (alice, bob):
                await conn.execute(WRITES["add_member"], uuid4(), chat, user)

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        hub = Hub(
            {
                **env,
                "REALTIME_HUB_JWT_SECRET": SECRET,
                "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
                "REALTIME_MEDIA_JITSI_APP_SECRET": JITSI_SECRET,
                "REALTIME_LOG_LEVEL": "warning",
            },
            port,
        )
        worker_env = {**env, "REALTIME_HUB_URL": base, "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY}
        reasons: list[ResyncReason] = []
        live: list[MessageReceived] = []
        invites: list[CallInvited] = []
        await hub.start()
        try:
            with structlog.testing.capture_logs() as logs:
                async with (
                    MessengerClient(
                        base, make_token(bob), options=QUICK, resync=reasons.append
                    ) as py,
                    node_clients(base, bob) as js,
                ):
                    py.on(MessageReceived, live.append)
                    py.on(CallInvited, invites.append)
                    for transport, client in js.items():
                        assert (await next_of(client, "resync"))["reason"] == "start"
                        started = await next_of(client, "started")
                        assert started["transport"] == TRANSPORT_CLASSES[transport]
                    await wait_until(lambda: reasons == ["start"], within=30)

                    # Live, through the worker.
                    worker = await start_cli("worker", env=worker_env)
                    await wait_for_line(worker, b"dispatcher_connected")
                    await _post(conn, chat, alice, "live")
                    for client in js.values():
                        [(target, payload)] = await received(client, 1)
                        assert (target, payload["body"]) == ("message_received", "live")
                    await wait_until(lambda: len(live) == 1, within=30)
                    assert await stop(worker, signal.SIGTERM) == 0

                    # The hub dies; rows written meanwhile are marked Done: pushed to nobody.
                    await hub.kill()
                    post = await _post(conn, chat, alice, "while the hub was down")
                    call = uuid4()
                    async with conn.transaction():
                        await conn.execute(WRITES["start_call"], call, alice, bob, f"call-{call}")
                        await conn.execute(WRITES["outbox_call_invited"], bob, call)
                    await conn.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
                    await hub.start()
                    for transport, client in js.items():
                        got = await received(client, 2)
                        assert [t for t, _ in got] == TARGETS, transport
                        assert got[0][1]["messageId"] == str(post)
                        assert got[1][1]["callId"] == str(call)
                        assert got[1][1]["media"]["roomName"] == f"call-{call}"
                        assert (await next_of(client, "resumed"))["missed"] == 2, transport
                    await wait_until(lambda: len(live) == 2 and len(invites) == 1, within=30)
                    assert live[1].message_id == post
                    assert invites[0].call_id == call
                    assert py.stats.missed == 2
                    assert reasons == ["start"]

                    # Past what the outbox retains (the rows are deleted): `limited`.
                    await hub.kill()
                    await _post(conn, chat, alice, "after the purge")
                    await conn.execute("DELETE FROM messenger.realtime_outbox")
                    await hub.start()
                    for client in js.values():
                        assert (await next_of(client, "resync"))["reason"] == "limited"
                    await wait_until(lambda: reasons == ["start", "limited"], within=30)

                    # A hub whose manifest has no member_spans: sync is off, and says so.
                    await hub.kill()
                    manifest = (EXAMPLE / "projections.sql").read_text()
                    without = tmp_path / "projections.sql"
                    without.write_text(manifest[: manifest.index("-- name: member_spans")])
                    off = run_cli("check", env={**env, "REALTIME_PROJECTIONS": str(without)})
                    assert "member_spans: not set: /api/sync is off" in off.stdout.splitlines()
                    assert off.returncode == 0, off.stdout
                    await hub.start(REALTIME_PROJECTIONS=str(without))
                    async with httpx.AsyncClient(base_url=base) as http:
                        answer = await http.get(
                            "/api/sync", headers={"Authorization": f"Bearer {make_token(bob)}"}
                        )
                        assert answer.status_code == 404
                    for client in js.values():
                        assert (await next_of(client, "resync"))["reason"] == "sync_off"
                    await wait_until(lambda: reasons == ["start", "limited", "sync_off"], within=30)
                    for transport, client in js.items():
                        await client.send({"report": True})
                        paths = (await next_of(client, "requests"))["paths"]
                        assert paths == ["/api/sync"], transport
                    assert py.stats.refetches == 0
        finally:
            await hub.stop()
        events = {entry["event"] for entry in logs}
        assert events.isdisjoint(REFERENCE_ROUTE_FAILURES), events
        assert "client_sync_off" in events
    finally:
        await conn.close()
