"""Point 7: after a run through ``serve`` with messages, a call, a conference and a quarantined
row, scan every table and every log line: no media token, TURN credential, JWT, configured secret
or message body in the outbox (any column, ``last_error`` included) or in the logs; no media
token, TURN credential, JWT or secret in any table at all."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import httpx
import pytest

from support.hub_wire import SECRET, make_token
from support.procs import wait_until
from tests.chaos.harness import (
    SERVICE_KEY,
    Listener,
    base_env,
    hub_proc,
    outbox_status,
    processes,
    report,
)
from tests.integration.support import table_texts

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
JITSI_SECRET = "jitsi-secret-" + "j" * 32
TURN_SECRET = "turn-secret-" + "t" * 32
BANNER = "realtime-dispatch: a token for user"


async def test_no_secret_or_body_at_rest(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice, bob = uuid4(), uuid4()
    bodies = [f"private body {uuid4().hex}" for _ in range(20)]
    env = base_env(
        database_url,
        REALTIME_MEDIA_JITSI_APP_SECRET=JITSI_SECRET,
        REALTIME_MEDIA_TURN_SECRET=TURN_SECRET,
        REALTIME_MEDIA_TURN_URLS="turn:127.0.0.1:3478",
        REALTIME_LOG_LEVEL="debug",
    )
    async with processes() as procs:
        serve = hub_proc(env, tmp_path, name="serve", command="serve")
        procs.append(serve)
        await serve.start()
        listener = Listener(bob, [serve.ws_url], keep_events=True)
        listener.start()
        try:
            await asyncio.wait_for(listener.connected.wait(), 30)
            alice_auth = {"Authorization": f"Bearer {make_token(alice)}"}
            async with httpx.AsyncClient(base_url=serve.http_url, headers=alice_auth) as http:
                created = await http.post(
                    "/api/chats", json={"title": "rest", "memberUserIds": [str(bob)]}
                )
                chat = created.json()["chatId"]
                for body in bodies:
                    sent = await http.post(f"/api/chats/{chat}/messages", json={"body": body})
                    assert sent.status_code == 201, sent.text
                call = await http.post("/api/calls", json={"calleeUserId": str(bob)})
                assert call.status_code == 201, call.text
                conference = await http.post(f"/api/chats/{chat}/conferences")
                assert conference.status_code == 201, conference.text
            # A row that cannot be built ends Quarantined with a last_error.
            await pool.execute(
                "INSERT INTO messenger.realtime_outbox"
                " (id, kind, target_kind, chat_id, message_id) VALUES"
                " (messenger.realtime_new_id(), 'MessageReceived', 'ChatGroup', $1,"
                " gen_random_uuid())",
                UUID(chat),
            )

            def media_seen() -> bool:
                targets = {e["target"] for e in listener.events}
                return {"call_invited", "conference_started"} <= targets and len(
                    listener.received
                ) == len(bodies)

            await wait_until(media_seen, within=30)

            async def settled() -> bool:
                status = await outbox_status(pool)
                return status.get("Pending", 0) == 0 and status.get("Quarantined", 0) == 1

            await wait_until(settled, within=30)
        finally:
            await listener.close()
        assert await serve.stop() == 0
    # What the clients received and must never find at rest.
    minted: list[str] = []
    for event in listener.events:
        media = event["arguments"][0].get("media")
        if media:
            minted.append(media["accessToken"])
            for server in media.get("iceServers", []):
                if server.get("credential"):
                    minted.append(server["credential"])
    assert minted, "no media credentials were minted: the scan would prove nothing"
    secrets = [*minted, JITSI_SECRET, TURN_SECRET, SECRET, SERVICE_KEY]

    texts = await table_texts(pool)
    findings = []
    for table, text in texts.items():
        findings += [f"{table}: secret" for s in secrets if s in text]
        findings += [f"{table}: JWT" for _ in JWT.finditer(text)]
    outbox = texts['"messenger"."realtime_outbox"']
    findings += [f"outbox: body {b}" for b in bodies if b in outbox]
    assert "private body" in texts['"messenger"."messages"']  # the domain table holds bodies

    log_lines = serve.log_text().splitlines()
    # With configured secrets, serve prints no ready-made token either.
    assert not [line for line in log_lines if line.startswith(BANNER)]
    for line in log_lines:
        findings += ["log: secret" for s in secrets if s in line]
        findings += ["log: JWT" for _ in JWT.finditer(line)]
        findings += ["log: body" for b in bodies if b in line]
    assert not findings, findings
    report(
        "data at rest: tables and logs scanned",
        tables=len(texts),
        log_lines=len(log_lines),
        minted_credentials=len(minted),
        bodies=len(bodies),
        findings=0,
    )
