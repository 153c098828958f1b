import asyncio
from datetime import UTC, datetime
from uuid import uuid4

import asyncpg
import pytest

from realtime_dispatch.messenger.schema import all_migrations, messenger_migrations, migrate
from realtime_dispatch.outbox import migrate as outbox_schema
from realtime_dispatch.outbox.migrate import applied_versions
from support.databases import with_database


async def test_template_has_every_packaged_migration(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        assert await applied_versions(conn) == {m.version for m in all_migrations()}
        assert await migrate(conn) == []  # idempotent


async def test_concurrent_migrate_on_empty_database(pg_server_url: str) -> None:
    name = f"rd_mig_{uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        conns = [await asyncpg.connect(with_database(pg_server_url, name)) for _ in range(3)]
        try:
            results = await asyncio.gather(*(migrate(c) for c in conns))
            assert sorted(len(r) for r in results) == [0, 0, len(all_migrations())]
            assert await applied_versions(conns[0]) == {m.version for m in all_migrations()}
        finally:
            for c in conns:
                await c.close()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_the_outbox_migrates_alone_and_the_messenger_after_it(pg_server_url: str) -> None:
    """An owner service with its own domain takes the outbox's migrations only; the messenger's
    tables come with the messenger's migrations, later, without touching the outbox's."""
    name = f"rd_mig_{uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    tables = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'messenger'"
    try:
        conn = await asyncpg.connect(with_database(pg_server_url, name))
        try:
            outbox_only = await outbox_schema.migrate(conn)
            assert outbox_only == outbox_schema.packaged_migrations()
            assert {r["table_name"] for r in await conn.fetch(tables)} == {
                "realtime_outbox",
                "realtime_dispatch_state",
                "realtime_schema_migrations",
                "realtime_revocations",  # the hub's, needed wherever the outbox is
                "realtime_sync_floor",
                "realtime_kinds",  # the kinds the outbox accepts
            }
            rest = await migrate(conn)
            assert {m.version for m in rest} == {m.version for m in all_migrations()} - {
                m.version for m in outbox_only
            }
            assert {"chats", "messages", "call_sessions"} <= {
                r["table_name"] for r in await conn.fetch(tables)
            }
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_outbox_columns_match_contract(pool: asyncpg.Pool) -> None:
    cols = await pool.fetch(
        "SELECT column_name, data_type, character_maximum_length, is_nullable, column_default"
        " FROM information_schema.columns"
        " WHERE table_schema = 'messenger' AND table_name = 'realtime_outbox'"
    )
    by = {c["column_name"]: c for c in cols}
    assert set(by) == {
        "id", "kind", "target_kind", "chat_id", "target_user_id", "message_id", "ref_id",
        "session_kind", "seq", "status", "attempts", "next_attempt_at", "last_error",
        "created_at", "updated_at", "row_version", "xid",
    }  # fmt: skip
    assert by["kind"]["character_maximum_length"] == 32
    assert by["target_kind"]["character_maximum_length"] == 16
    assert by["session_kind"]["character_maximum_length"] == 12
    assert by["status"]["character_maximum_length"] == 16
    assert by["last_error"]["character_maximum_length"] == 512
    assert "Pending" in by["status"]["column_default"]
    indexes = {
        r["indexname"]
        for r in await pool.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'messenger'"
            " AND tablename = 'realtime_outbox'"
        )
    }
    assert {"ix_rto_due", "ix_rto_chat", "ix_rto_pending_id"} <= indexes


BAD_ROWS = [
    ("'Bogus'", "'ChatGroup'", "gen_random_uuid()", "NULL", "NULL", "0"),
    ("'MessageReceived'", "'Room'", "gen_random_uuid()", "NULL", "NULL", "0"),
    ("'MessageReceived'", "'ChatGroup'", "NULL", "NULL", "NULL", "0"),
    ("'ContactRemoved'", "'User'", "NULL", "NULL", "NULL", "0"),
    ("'CallInvited'", "'User'", "NULL", "gen_random_uuid()", "'Group'", "0"),
    ("'MessageReceived'", "'ChatGroup'", "gen_random_uuid()", "NULL", "NULL", "-1"),
]


@pytest.mark.parametrize("values", BAD_ROWS)
async def test_check_constraints_reject_invalid_rows(
    pool: asyncpg.Pool, values: tuple[str, ...]
) -> None:
    kind, target, chat, user, session, attempts = values
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute(
            "INSERT INTO messenger.realtime_outbox"
            " (id, kind, target_kind, chat_id, target_user_id, session_kind, attempts)"
            f" VALUES (messenger.realtime_new_id(), {kind}, {target}, {chat}, {user}, {session},"
            f" {attempts})"
        )


async def test_trigger_notifies_only_while_dispatcher_idle(pool: asyncpg.Pool) -> None:
    listener = await pool.acquire()
    got: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        got.put_nowait(payload)

    await listener.add_listener("realtime_outbox", on_notify)
    insert = (
        "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id)"
        " VALUES (messenger.realtime_new_id(), 'ContactRemoved', 'User',"
        " gen_random_uuid(), gen_random_uuid())"
    )
    try:
        await pool.execute(insert)  # idle by default: notifies
        assert await asyncio.wait_for(got.get(), 5) == ""
        await pool.execute("UPDATE messenger.realtime_dispatch_state SET idle = false")
        await pool.execute(insert)
        await asyncio.sleep(0.3)
        assert got.empty()
    finally:
        await listener.remove_listener("realtime_outbox", on_notify)
        await pool.release(listener)


async def test_upgrade_marks_blocked_pairs_and_blanks_deleted_fingerprints(
    pg_server_url: str,
) -> None:
    """Rows written before migrations 0015/0016: a block in a two-person chat marks that chat;
    a deleted message's plain fingerprint is blanked, a live one's kept."""

    name = f"rd_mig_{uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    alice, bob, pair, gone, live = uuid4(), uuid4(), uuid4(), uuid4(), uuid4()
    try:
        conn = await asyncpg.connect(with_database(pg_server_url, name))
        try:
            before = [m for m in messenger_migrations() if m.version < 15]
            await outbox_schema.migrate(conn, before)
            await conn.execute(
                "INSERT INTO messenger.chats (id, title, created_by) VALUES ($1, 'p', $2)",
                pair,
                alice,
            )
            await conn.executemany(
                "INSERT INTO messenger.participants (id, chat_id, user_id) VALUES ($1, $2, $3)",
                [(uuid4(), pair, alice), (uuid4(), pair, bob)],
            )
            block = uuid4()
            await conn.execute(
                "INSERT INTO messenger.blacklist (id, owner_user_id, blocked_user_id)"
                " VALUES ($1, $2, $3)",
                block,
                bob,
                alice,
            )
            for seq, (message, deleted) in enumerate(((gone, True), (live, False)), start=1):
                await conn.execute(
                    "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body,"
                    " deleted_at) VALUES ($1, $2, $3, $4, $5, $6)",
                    message,
                    pair,
                    seq,
                    alice,
                    None if deleted else "hi",
                    datetime.now(UTC) if deleted else None,
                )
                await conn.execute(
                    "INSERT INTO messenger.message_client_ids VALUES ($1, $2, $3, $4, $5)",
                    pair,
                    alice,
                    f"c{seq}",
                    message,
                    b"plain-sha256-of-the-content....",
                )
            await migrate(conn)
            marks = await conn.fetch("SELECT chat_id, blacklist_id FROM messenger.blacklist_chats")
            assert [(r["chat_id"], r["blacklist_id"]) for r in marks] == [(pair, block)]
            prints = dict(
                await conn.fetch("SELECT message_id, fingerprint FROM messenger.message_client_ids")
            )
            assert prints == {gone: b"", live: b"plain-sha256-of-the-content...."}
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()
