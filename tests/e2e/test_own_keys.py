"""Keys of the owner's own type (``REALTIME_KEY_TYPE``) through real processes and the official
SignalR client.

* bigint (Django's ``BigAutoField`` tables, ``own_keys/bigint_schema.sql``): ``migrate`` makes
  the outbox's key columns bigint, ``check`` holds on ``$1 bigint[]`` queries, a token whose
  ``sub`` is the integer 42 (or the string ``"43"``) connects, and the pushes carry the ids as
  JSON numbers: the room's message in ``chat:17``, a read receipt, an invite to ``user:43``,
  a live membership change notified with numbers, ``user_typing``, and ``WatchPresence``'s
  answer (ids in as numbers or decimal strings, out as numbers). A UUID ``sub`` is
  refused. Every command against that outbox with another key type exits 2 with one line.
* text: one message on text keys, the outbox from ``migrate --print-sql``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import jwt
import pytest

from support.hub_wire import SECRET
from support.procs import cli_env, free_port, run_cli, running, side_by_side
from tests.e2e.hub_and_worker import hub_and_worker_env
from tests.hub_fixtures import NodeClient

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent / "own_keys"
EVENTS = ["message_received", "read_receipt_updated", "contact_request_received", "user_typing"]


def token(sub: object) -> str:
    """An HS256 token whose user claim is ``sub`` as given (a JSON number stays a number)."""
    return jwt.encode({"sub": sub, "exp": int(time.time() + 300)}, SECRET, algorithm="HS256")


async def next_message(client: NodeClient, target: str) -> list[Any]:
    event = await client.event(within=30)
    assert event["event"] == "message", event
    assert event["target"] == target, event
    args: list[Any] = event["args"]
    return args


async def outbox_id(conn: asyncpg.Connection, kind: str) -> str:
    return str(
        await conn.fetchval("SELECT id FROM messenger.realtime_outbox WHERE kind = $1", kind)
    )


def zulu(moment: Any) -> str:
    return str(moment.isoformat().replace("+00:00", "Z"))


async def test_bigint_keys_end_to_end(empty_database: str) -> None:
    url = empty_database
    conn = await asyncpg.connect(url)
    try:
        await conn.execute((HERE / "bigint_schema.sql").read_text())
        env = cli_env(
            REALTIME_DATABASE_URL=url,
            REALTIME_PROJECTIONS=str(HERE / "bigint_projections.sql"),
            REALTIME_KEY_TYPE="bigint",
        )
        migrated = run_cli("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        types = await conn.fetch(
            "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
            " WHERE attrelid = 'messenger.realtime_outbox'::regclass"
            " AND attname IN ('id', 'chat_id', 'target_user_id', 'message_id', 'ref_id')"
        )
        assert {r["attname"]: r["type"] for r in types} == {
            "id": "uuid",
            "chat_id": "bigint",
            "target_user_id": "bigint",
            "message_id": "bigint",
            "ref_id": "bigint",
        }
        checked = run_cli("check", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        for line in ("messages: ok", "read_receipts: ok", "contact_requests: ok"):
            assert line in checked.stdout.splitlines()

        alice, bob = 42, 43
        await conn.execute("INSERT INTO talk_room (id, title) VALUES (17, 'general'), (18, 'b')")
        await conn.execute(
            "INSERT INTO talk_member (room_id, account_id) VALUES (17, $1), (17, $2), (18, $1)",
            alice,
            bob,
        )

        port = free_port()
        hub_env, worker_env = hub_and_worker_env(env, port)
        hub_url = f"http://127.0.0.1:{port}/hubs/messenger"
        async with running("hub", "--port", str(port), env=hub_env, ready=b"listening on"):
            # A JSON-number sub and a decimal-string sub are both the user's key; a UUID is not.
            alice_client = await NodeClient.start(hub_url, token(alice), targets=EVENTS)
            bob_client = await NodeClient.start(hub_url, token(str(bob)), targets=EVENTS)
            stranger = await NodeClient.start(hub_url, token(str(uuid4())), targets=EVENTS)
            try:
                assert (await alice_client.event(within=30))["event"] == "started"
                assert (await bob_client.event(within=30))["event"] == "started"
                refused = await stranger.event(within=30)
                assert refused["event"] == "start_failed", refused
                assert "Status code '401'" in refused["error"]
                async with running("worker", env=worker_env, ready=b"dispatcher_connected"):
                    await exchange(conn, alice_client, bob_client)
                # Revoking user 42 (a bigint in the revocations table, a number in its
                # notification) closes Alice's connection on the hub.
                revoked = run_cli("revoke", "--user", "42", "--json", env=env)
                assert revoked.returncode == 0, revoked.stderr
                assert '"userId":42' in revoked.stdout
                assert (await alice_client.event(within=30))["event"] == "closed"
                assert run_cli("revoke", "--user", "forty-two", env=env).returncode == 2
            finally:
                await alice_client.stop()
                await bob_client.stop()
                await stranger.stop()
        statuses = await conn.fetch("SELECT kind, status FROM messenger.realtime_outbox")
        assert {r["status"] for r in statuses} == {"Done"}, statuses

        # The same outbox with another key type: every command exits 2, one line naming both.
        # (side by side: each is a process start, the slowest part of this test)
        runs = [
            (other, command, {**hub_env, **worker_env, "REALTIME_KEY_TYPE": other})
            for other in ("uuid", "text")
            for command in ("migrate", "check", "stats", "worker", "hub")
        ]
        results = await side_by_side([([command], run_env) for _, command, run_env in runs])
        for (other, command, _), done in zip(runs, results, strict=True):
            assert done.returncode == 2, (command, done.stderr)
            assert done.stderr.strip().splitlines()[-1] == (
                f"realtime-dispatch: invalid setting REALTIME_KEY_TYPE: {other}, but the"
                " outbox's key columns (chat_id, target_user_id, message_id, ref_id) are"
                " bigint: set REALTIME_KEY_TYPE=bigint, or recreate the outbox"
            ), (command, done.stderr)
    finally:
        await conn.close()


async def exchange(conn: asyncpg.Connection, alice: NodeClient, bob: NodeClient) -> None:
    async with conn.transaction():
        post = await conn.fetchval(
            "INSERT INTO talk_post (room_id, number, author_id, body)"
            " VALUES (17, 1, 42, 'hello from Django') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)"
            " VALUES ('MessageReceived', 'ChatGroup', 17, $1, 1)",
            post,
        )
    [payload] = await next_message(bob, "message_received")
    sent_at = await conn.fetchval("SELECT sent_at FROM talk_post WHERE id = $1", post)
    assert payload == {
        "eventId": await outbox_id(conn, "MessageReceived"),
        "chatId": 17,
        "messageId": post,
        "seq": 1,
        "senderUserId": 42,
        "kind": "Text",
        "sentAt": zulu(sent_at),
        "body": "hello from Django",
    }
    assert await next_message(alice, "message_received") == [payload]

    async with conn.transaction():
        member = await conn.fetchval(
            "UPDATE talk_member SET last_read_number = 1, last_read_at = now()"
            " WHERE room_id = 17 AND account_id = 43 RETURNING id"
        )
        await conn.execute(
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, ref_id)"
            " VALUES ('ReadReceiptUpdated', 'ChatGroup', 17, $1)",
            member,
        )
    [receipt] = await next_message(alice, "read_receipt_updated")
    assert (receipt["chatId"], receipt["userId"], receipt["lastReadSeq"]) == (17, 43, 1)
    assert await next_message(bob, "read_receipt_updated") == [receipt]

    # user:43 alone: Alice's invite reaches Bob, not Alice.
    async with conn.transaction():
        invite = await conn.fetchval(
            "INSERT INTO talk_invite (from_id, to_id) VALUES (42, 43) RETURNING id"
        )
        await conn.execute(
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, target_user_id, ref_id)"
            " VALUES ('ContactRequestReceived', 'User', 43, $1)",
            invite,
        )
    [asked] = await next_message(bob, "contact_request_received")
    assert (asked["requestId"], asked["fromUserId"], asked["toUserId"]) == (invite, 42, 43)

    # Bob joins room 18 while connected: the trigger's numbers make the hub add chat:18.
    await conn.execute("INSERT INTO talk_member (room_id, account_id) VALUES (18, 43)")
    async with conn.transaction():
        second = await conn.fetchval(
            "INSERT INTO talk_post (room_id, number, author_id, body)"
            " VALUES (18, 1, 42, 'room b') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)"
            " VALUES ('MessageReceived', 'ChatGroup', 18, $1, 1)",
            second,
        )
    [in_b] = await next_message(bob, "message_received")
    assert (in_b["chatId"], in_b["messageId"], in_b["body"]) == (18, second, "room b")
    assert (await next_message(alice, "message_received"))[0]["messageId"] == second

    # Typing in chat:17, the id given as a number: Bob hears user 42 as a number.
    await alice.send({"invoke": "Typing", "args": [17]})
    assert (await alice.event(within=10))["event"] == "invoked"
    [typing] = await next_message(bob, "user_typing")
    assert (typing["chatId"], typing["userId"]) == (17, 42)

    # Presence on bigint keys: ids in as numbers or decimal strings, out as numbers; 99 shares
    # no chat with Alice, and a UUID is not a key of this type.
    await alice.send({"invoke": "WatchPresence", "args": [["43", 99]]})
    watched = await alice.event(within=10)
    assert watched == {
        "event": "invoked",
        "result": [{"userId": 43, "online": True, "lastSeenAt": None}],
    }, watched
    await alice.send({"invoke": "WatchPresence", "args": [[str(uuid4())]]})
    refused = await alice.event(within=10)
    assert refused["event"] == "invoke_failed", refused
    assert "a list of user ids" in refused["error"]


TEXT_SCHEMA = """
CREATE TABLE rooms (slug text PRIMARY KEY);
CREATE TABLE members (room text NOT NULL, handle text NOT NULL);
CREATE TABLE posts (
    ref text PRIMARY KEY, room text NOT NULL, n bigint NOT NULL, author text,
    body text NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""
TEXT_MANIFEST = """
-- name: messages
SELECT ref AS id, room AS chat_id, n AS seq, author AS sender_user_id, 'Text' AS kind, body,
       NULL::json AS file_meta, NULL::text AS card_text, at AS sent_at,
       NULL::timestamptz AS edited_at, NULL::timestamptz AS deleted_at
FROM posts WHERE ref = ANY($1::text[]);

-- name: member_chats
SELECT handle AS user_id, room AS chat_id FROM members WHERE handle = ANY($1::text[]);
"""


async def test_text_keys_deliver_string_ids(empty_database: str, tmp_path: Path) -> None:
    url = empty_database
    manifest = tmp_path / "projections.sql"
    manifest.write_text(TEXT_MANIFEST)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(TEXT_SCHEMA)
        env = cli_env(
            REALTIME_DATABASE_URL=url, REALTIME_PROJECTIONS=str(manifest), REALTIME_KEY_TYPE="text"
        )
        printed = run_cli("migrate", "--print-sql", "--only", "outbox", env=env)
        assert printed.returncode == 0, printed.stderr
        assert "chat_id text NULL" in " ".join(printed.stdout.split())
        await conn.execute(printed.stdout)
        checked = run_cli("check", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        await conn.execute(
            "INSERT INTO rooms VALUES ('design'); INSERT INTO members VALUES ('design', 'ana'),"
            " ('design', 'ben')"
        )
        port = free_port()
        hub_env, worker_env = hub_and_worker_env(env, port)
        hub_url = f"http://127.0.0.1:{port}/hubs/messenger"
        async with running("hub", "--port", str(port), env=hub_env, ready=b"listening on"):
            ben = await NodeClient.start(hub_url, token("ben"), targets=EVENTS)
            numeric = await NodeClient.start(hub_url, token(7), targets=EVENTS)
            try:
                assert (await ben.event(within=30))["event"] == "started"
                refused = await numeric.event(within=30)  # a number is not a text key
                assert refused["event"] == "start_failed", refused
                assert "Status code '401'" in refused["error"]
                async with running("worker", env=worker_env, ready=b"dispatcher_connected"):
                    async with conn.transaction():
                        await conn.execute(
                            "INSERT INTO posts (ref, room, n, author, body)"
                            " VALUES ('p-1', 'design', 1, 'ana', 'hi')"
                        )
                        await conn.execute(
                            "INSERT INTO messenger.realtime_outbox"
                            " (kind, target_kind, chat_id, message_id, seq)"
                            " VALUES ('MessageReceived', 'ChatGroup', 'design', 'p-1', 1)"
                        )
                    [payload] = await next_message(ben, "message_received")
            finally:
                await ben.stop()
                await numeric.stop()
        assert (payload["chatId"], payload["messageId"], payload["senderUserId"]) == (
            "design",
            "p-1",
            "ana",
        )
        assert payload["eventId"] == await outbox_id(conn, "MessageReceived")
    finally:
        await conn.close()


async def test_the_reference_messenger_refuses_other_key_types(empty_database: str) -> None:
    env = cli_env(REALTIME_DATABASE_URL=empty_database, REALTIME_KEY_TYPE="bigint")
    refused, printed, alone, bad = await side_by_side(
        [
            (["migrate"], env),
            (["migrate", "--print-sql"], env),
            (["migrate", "--print-sql", "--only", "outbox"], env),
            (["check"], {**env, "REALTIME_KEY_TYPE": "int"}),
        ]
    )
    for done in (refused, printed):
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            "realtime-dispatch: invalid setting REALTIME_KEY_TYPE: bigint is for an owner's own"
            " schema: the reference messenger's keys are uuid (set REALTIME_PROJECTIONS to your"
            " manifest, or use migrate --only outbox)"
        )
    assert alone.returncode == 0, alone.stderr
    assert "target_user_id bigint NULL" in " ".join(alone.stdout.split())
    assert bad.returncode == 2
    assert "REALTIME_KEY_TYPE" in bad.stderr
