"""A Node app's writes on a Prisma schema, through real processes: ``examples/node-writer``
(the migration Prisma makes from its ``schema.prisma``, text keys, time columns
``@db.Timestamptz``, membership times from the database's ``now()``) and its ``writer.mjs``,
which sends through the ``pg`` package the SQL a Prisma ``$transaction`` sends: the post, the
conversation's number bumped under ``FOR UPDATE``, the outbox row by ``$executeRaw``. ``hub``
and ``worker`` on the example's manifest deliver the post to the official SignalR client; a
member who leaves gets nothing of the time away, live or through ``GET /api/sync``, and gets
what follows the rejoin. The same schema with Prisma's default ``timestamp(3)`` columns is
refused by ``check`` with one line per query."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jwt
import orjson
import pytest

from support.hub_wire import SECRET
from support.procs import cli_env, free_port, run_cli, running, wait_ready
from tests.e2e.hub_and_worker import hub_and_worker_env
from tests.hub_fixtures import NodeClient, require_node_client

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "node-writer"


def token(user: str) -> str:
    return jwt.encode({"sub": user, "exp": int(time.time() + 300)}, SECRET, algorithm="HS256")


async def writer(url: str, command: str, **arguments: object) -> dict[str, Any]:
    """One command of ``writer.mjs`` (one transaction), its JSON answer."""
    require_node_client()
    process = await asyncio.create_subprocess_exec(
        "node",
        str(EXAMPLE / "writer.mjs"),
        command,
        orjson.dumps(arguments).decode(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env={"PATH": cli_env()["PATH"], "DATABASE_URL": url},
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    answer: dict[str, Any] = orjson.loads(out)
    return answer


async def next_message(client: NodeClient) -> dict[str, Any]:
    event = await client.event(within=30)
    assert event["event"] == "message", event
    assert event["target"] == "message_received", event
    [payload] = event["args"]
    assert isinstance(payload, dict)
    return payload


def zulu(moment: Any) -> str:
    return str(moment.isoformat().replace("+00:00", "Z"))


async def migrated(url: str, schema: str) -> dict[str, str]:
    """``schema`` and the outbox (text keys), as the app's two migrations; the environment."""
    env = cli_env(
        REALTIME_DATABASE_URL=url,
        REALTIME_PROJECTIONS=str(EXAMPLE / "projections.sql"),
        REALTIME_KEY_TYPE="text",
    )
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(schema)
        printed = run_cli("migrate", "--print-sql", "--only", "outbox", env=env)
        assert printed.returncode == 0, printed.stderr
        await conn.execute(printed.stdout)
    finally:
        await conn.close()
    return env


async def test_node_writer_on_a_prisma_schema_is_delivered_and_resumed(
    empty_database: str,
) -> None:
    url = empty_database
    env = await migrated(url, (EXAMPLE / "schema.sql").read_text())
    checked = run_cli("check", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for query in ("messages", "member_chats", "deleted_chats", "member_spans"):
        assert f"{query}: ok" in checked.stdout.splitlines()

    conn = await asyncpg.connect(url)
    port = free_port()
    hub_env, worker_env = hub_and_worker_env(env, port)
    hub_url = f"http://127.0.0.1:{port}/hubs/messenger"
    try:
        async with (
            running("hub", "--port", str(port), env=hub_env, ready=b"listening on") as hub,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
        ):

            async def sync(since: str | None) -> dict[str, Any]:
                params = {} if since is None else {"since": since}
                answer = await http.get(
                    "/api/sync", params=params, headers={"Authorization": f"Bearer {token('ben')}"}
                )
                assert answer.status_code == 200, answer.text
                page: dict[str, Any] = answer.json()
                return page

            await wait_ready(hub, f"http://127.0.0.1:{port}")
            cursor = (await sync(None))["nextCursor"]
            ana = await NodeClient.start(hub_url, token("ana"), targets=["message_received"])
            ben = await NodeClient.start(hub_url, token("ben"), targets=["message_received"])
            try:
                assert (await ana.event(within=30))["event"] == "started"
                assert (await ben.event(within=30))["event"] == "started"
                async with running("worker", env=worker_env, ready=b"dispatcher_connected"):
                    made = await writer(url, "conversation", title="launch", members=["ana", "ben"])
                    chat = made["conversationId"]
                    first = await writer(
                        url, "post", conversationId=chat, authorId="ana", body="hello from Prisma"
                    )
                    assert first["seq"] == 1
                    payload = await next_message(ben)
                    sent_at = await conn.fetchval(
                        'SELECT "sentAt" FROM "Message" WHERE "id" = $1', first["messageId"]
                    )
                    outbox = await conn.fetchrow(
                        "SELECT id, chat_id, message_id, seq FROM messenger.realtime_outbox"
                    )
                    assert tuple(outbox[1:]) == (chat, first["messageId"], 1)
                    assert payload == {
                        "eventId": str(outbox["id"]),
                        "chatId": chat,
                        "messageId": first["messageId"],
                        "seq": 1,
                        "senderUserId": "ana",
                        "kind": "Text",
                        "sentAt": zulu(sent_at),
                        "body": "hello from Prisma",
                    }
                    assert await next_message(ana) == payload

                    # Ben leaves (leftAt = the database's now()); what is written meanwhile
                    # is not his. He rejoins (a new membership row) and gets what follows.
                    assert await writer(url, "leave", conversationId=chat, accountId="ben") == {
                        "left": True
                    }
                    away = await writer(
                        url, "post", conversationId=chat, authorId="ana", body="while you were out"
                    )
                    assert (await next_message(ana))["messageId"] == away["messageId"]
                    await writer(url, "join", conversationId=chat, accountId="ben")
                    back = await writer(
                        url, "post", conversationId=chat, authorId="ana", body="welcome back"
                    )
                    # In order: had the post of the time away reached Ben, it would come first.
                    live = await next_message(ben)
                    assert (live["messageId"], live["seq"]) == (back["messageId"], 3)
                    assert (await next_message(ana))["messageId"] == back["messageId"]
            finally:
                await ana.stop()
                await ben.stop()

            # Resume from the cursor Ben took before it all: his two spans, not the gap.
            events: list[dict[str, Any]] = []
            while True:
                page = await sync(cursor)
                events += page["events"]
                cursor = page["nextCursor"]
                if not page["more"] and not page["heldBack"]:
                    break
            assert [(e["target"], e["payload"]["body"]) for e in events] == [
                ("message_received", "hello from Prisma"),
                ("message_received", "welcome back"),
            ]
            assert events[0]["payload"] == payload
        statuses = await conn.fetch(
            "SELECT seq, status FROM messenger.realtime_outbox ORDER BY seq"
        )
        assert [tuple(r) for r in statuses] == [(1, "Done"), (2, "Done"), (3, "Done")]
    finally:
        await conn.close()


async def test_prisma_default_timestamp_columns_are_refused_by_check(
    empty_database: str,
) -> None:
    """Without ``@db.Timestamptz`` Prisma makes every ``DateTime`` a ``timestamp(3)``: a time
    without its zone, which ``check`` (and every process's start) refuses."""
    schema = (EXAMPLE / "schema.sql").read_text()
    as_prisma_default = schema.replace("TIMESTAMPTZ(3)", "TIMESTAMP(3)").replace(
        "TIMESTAMPTZ(6)", "TIMESTAMP(3)"
    )
    assert "TIMESTAMPTZ" not in as_prisma_default
    env = await migrated(empty_database, as_prisma_default)
    checked = run_cli("check", env=env)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert "messages: column sent_at is timestamp, expected timestamptz" in lines
    assert "member_spans: column joined_at is timestamp, expected timestamptz" in lines
    assert "member_chats: ok" in lines
