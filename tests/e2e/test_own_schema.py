"""Adoption on someone else's schema, through real processes: ``examples/own-schema`` (EF Core
style tables, its manifest, its membership trigger, outbox rows by plain SQL) in a database
that has nothing of the reference messenger. The outbox's schema comes from
``migrate --print-sql --only outbox``; ``hub`` and ``worker`` run on the manifest, and the
official SignalR client receives the chat message, the read receipt and a call invite with
minted media credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import jwt
import pytest

from support.hub_wire import SERVICE_KEY, make_token
from support.procs import cli_env, free_port, run_cli, running, wait_ready
from tests.e2e.hub_and_worker import hub_and_worker_env
from tests.e2e.own_schema import EXAMPLE, WRITES
from tests.hub_fixtures import NodeClient

pytestmark = pytest.mark.e2e

JITSI_SECRET = "jitsi-app-secret-of-the-adopter-32-bytes!"
TURN_SECRET = "turn-shared-secret-of-the-adopter"


async def _next_message(client: NodeClient) -> dict[str, Any]:
    event = await client.event(within=30)
    assert event["event"] == "message", event
    return event


async def test_hub_and_worker_on_an_own_schema(empty_database: str) -> None:
    url = empty_database
    conn = await asyncpg.connect(url)
    try:
        await conn.execute((EXAMPLE / "schema.sql").read_text())
        # The outbox's schema as an adopter folds it into their own migrations.
        env = cli_env(
            REALTIME_DATABASE_URL=url, REALTIME_PROJECTIONS=str(EXAMPLE / "projections.sql")
        )
        printed = run_cli("migrate", "--print-sql", "--only", "outbox", env=env)
        assert printed.returncode == 0, printed.stderr
        await conn.execute(printed.stdout)
        checked = run_cli("check", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        lines = checked.stdout.splitlines()
        assert len(lines) == 15  # one per query of the contract
        assert "messages: ok" in lines
        assert "member_chats: ok" in lines
        assert "member_spans: ok" in lines
        assert "conferences: disabled" in checked.stdout

        alice, bob = uuid4(), uuid4()
        chat = uuid4()
        async with conn.transaction():
            await conn.execute(WRITES["create_conversation"], chat, "adopters")
            for user in (alice, bob):
                await conn.execute(WRITES["add_member"], uuid4(), chat, user)

        port = free_port()
        hub_env, worker_env = hub_and_worker_env(
            env,
            port,
            REALTIME_MEDIA_JITSI_APP_SECRET=JITSI_SECRET,
            REALTIME_MEDIA_TURN_URLS="turn:turn.adopter.example:3478",
            REALTIME_MEDIA_TURN_SECRET=TURN_SECRET,
        )
        async with running("hub", "--port", str(port), env=hub_env, ready=b"listening on") as hub:
            # The line comes just before the socket: until /readyz answers.
            await wait_ready(hub, f"http://127.0.0.1:{port}")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                # Nothing of the reference messenger: no REST API, no docs, no demo page; sync
                # is there (the manifest has member_spans), behind a token.
                for path in ("/api/chats", "/docs", "/openapi.json", "/"):
                    assert (await http.get(path)).status_code == 404, path
                assert (await http.get("/api/sync")).status_code == 401
                # Nor its media lifecycle jobs (the conferences and recordings are the
                # adopter's).
                assert "messenger_realtime_job_" not in (await http.get("/metrics")).text
            events = ["message_received", "read_receipt_updated", "call_invited"]
            url_hub = f"http://127.0.0.1:{port}/hubs/messenger"
            alice_client = await NodeClient.start(url_hub, make_token(alice), targets=events)
            bob_client = await NodeClient.start(url_hub, make_token(bob), targets=events)
            try:
                assert (await alice_client.event())["event"] == "started"
                assert (await bob_client.event())["event"] == "started"
                async with running("worker", env=worker_env, ready=b"dispatcher_connected"):
                    await _exchange(
                        conn,
                        chat=chat,
                        alice=alice,
                        bob=bob,
                        alice_client=alice_client,
                        bob_client=bob_client,
                    )
                # The worker stopped gracefully: every outcome is written.
                rows = await conn.fetch("SELECT kind, status FROM messenger.realtime_outbox")
                assert sorted((r["kind"], r["status"]) for r in rows) == [
                    ("CallInvited", "Done"),
                    ("MessageReceived", "Done"),
                    ("ReadReceiptUpdated", "Done"),
                ]
            finally:
                await alice_client.stop()
                await bob_client.stop()
        tables = await conn.fetch(
            "SELECT schemaname || '.' || tablename AS t FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
        )
        assert [r["t"] for r in tables] == [
            "messenger.realtime_dispatch_state",
            "messenger.realtime_kinds",
            "messenger.realtime_outbox",
            "messenger.realtime_revocations",
            "messenger.realtime_schema_migrations",
            "messenger.realtime_sync_floor",
            "public.ConversationMembers",
            "public.Conversations",
            "public.Posts",
            "public.VoiceCalls",
        ]
    finally:
        await conn.close()


async def _outbox_id(conn: asyncpg.Connection, kind: str) -> UUID:
    """The one outbox row of ``kind``: every push carries its id as ``eventId``."""
    row_id: UUID = await conn.fetchval(
        "SELECT id FROM messenger.realtime_outbox WHERE kind = $1", kind
    )
    return row_id


async def _exchange(
    conn: asyncpg.Connection,
    *,
    chat: UUID,
    alice: UUID,
    bob: UUID,
    alice_client: NodeClient,
    bob_client: NodeClient,
) -> None:
    post = uuid4()
    async with conn.transaction():
        number = await conn.fetchval(WRITES["next_number"], chat)
        await conn.execute(WRITES["insert_post"], post, chat, number, alice, "hello from EF Core")
        await conn.execute(WRITES["outbox_message_received"], chat, post, number)
    received = await _next_message(bob_client)
    assert received["target"] == "message_received"
    [payload] = received["args"]
    sent_at = await conn.fetchval('SELECT "PostedUtc" FROM "Posts" WHERE "Id" = $1', post)
    assert payload == {
        "eventId": str(await _outbox_id(conn, "MessageReceived")),
        "chatId": str(chat),
        "messageId": str(post),
        "seq": 1,
        "senderUserId": str(alice),
        "kind": "Text",
        "sentAt": sent_at.isoformat().replace("+00:00", "Z"),
        "body": "hello from EF Core",
    }
    assert (await _next_message(alice_client))["args"] == [payload]

    async with conn.transaction():
        member = await conn.fetchval(WRITES["mark_read"], chat, bob, 1)
        await conn.execute(WRITES["outbox_read_receipt"], chat, member)
    receipt = await _next_message(alice_client)
    assert receipt["target"] == "read_receipt_updated"
    read_at = await conn.fetchval(
        'SELECT "LastSeenUtc" FROM "ConversationMembers" WHERE "Id" = $1', member
    )
    assert receipt["args"] == [
        {
            "eventId": str(await _outbox_id(conn, "ReadReceiptUpdated")),
            "chatId": str(chat),
            "userId": str(bob),
            "lastReadSeq": 1,
            "readAt": read_at.isoformat().replace("+00:00", "Z"),
        }
    ]
    assert (await _next_message(bob_client))["args"] == receipt["args"]

    call = uuid4()
    async with conn.transaction():
        await conn.execute(WRITES["start_call"], call, alice, bob, f"call-{call}")
        await conn.execute(WRITES["outbox_call_invited"], bob, call)
    invite = await _next_message(bob_client)
    assert invite["target"] == "call_invited"
    [invited] = invite["args"]
    assert invited["eventId"] == str(await _outbox_id(conn, "CallInvited"))
    assert (invited["callId"], invited["callerUserId"], invited["calleeUserId"]) == (
        str(call),
        str(alice),
        str(bob),
    )
    media = invited["media"]
    assert media["roomName"] == f"call-{call}"
    claims = jwt.decode(media["accessToken"], JITSI_SECRET, algorithms=["HS256"], audience="jitsi")
    assert claims["room"] == f"call-{call}"
    [ice] = media["iceServers"]
    assert ice["urls"] == ["turn:turn.adopter.example:3478"]
    assert ice["username"]
    assert ice["credential"]


async def test_outbox_alone_and_collisions_are_one_line(
    empty_database: str, tmp_path: Path
) -> None:
    url = empty_database
    conn = await asyncpg.connect(url)
    try:
        # The adopter has a table named like one of the reference messenger's.
        await conn.execute("CREATE SCHEMA messenger; CREATE TABLE messenger.messages (x int)")
        env = cli_env(REALTIME_DATABASE_URL=url)
        alone = run_cli("migrate", "--only", "outbox", env=env)
        assert alone.returncode == 0, alone.stderr
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'messenger'")
        assert sorted(r["tablename"] for r in tables) == [
            "messages",
            "realtime_dispatch_state",
            "realtime_kinds",
            "realtime_outbox",
            "realtime_revocations",
            "realtime_schema_migrations",
            "realtime_sync_floor",
        ]
        clash = run_cli("migrate", env=env)
        assert clash.returncode == 2
        assert clash.stderr.strip().splitlines() == [
            "realtime-dispatch: schema conflict: migration 0002_chat_domain:"
            ' relation "messages" already exists'
        ]

        # A manifest off its contract stops the worker before its first claim.
        manifest = (EXAMPLE / "projections.sql").read_text()
        broken = tmp_path / "projections.sql"
        broken.write_text(manifest.replace('p."PostedUtc" AS sent_at', 'p."PostedUtc" AS posted'))
        await conn.execute((EXAMPLE / "schema.sql").read_text())
        worker = run_cli(
            "worker",
            env={
                **env,
                "REALTIME_PROJECTIONS": str(broken),
                "REALTIME_HUB_URL": "http://127.0.0.1:9",
                "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
            },
        )
        assert worker.returncode == 2
        assert worker.stderr.strip().splitlines() == [
            "realtime-dispatch: invalid setting"
            f" REALTIME_PROJECTIONS: messages: column sent_at missing ({broken})"
        ]
    finally:
        await conn.close()
