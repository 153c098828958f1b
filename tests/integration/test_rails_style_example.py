"""``examples/rails-style`` against the real database: Rails-style tables (bigint keys, boolean
``removed`` flags, UTC ``timestamp`` columns, a composite key on participations, hard-deleted
conversations with a tombstone), the outbox on bigint keys, the example's manifest and writes.
``check`` holds; each declared kind is delivered with numeric ids; a note of a deleted
conversation is TargetGone, a mistyped conversation id is quarantined; the membership span
follows the flag (a rejoin starts a new span; a read mark moves nothing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.manifest.check import check_manifest
from realtime_dispatch.manifest.manifest import load_manifest
from realtime_dispatch.messenger.schema import migrate
from realtime_dispatch.outbox.queries import parse_queries
from realtime_dispatch.values.keys import BIGINT_KEYS
from support.databases import scratch_database
from tests.integration.support import make_stack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rails-style"
WRITES = dict(parse_queries((EXAMPLE / "writes.sql").read_text()))
MANIFEST = load_manifest(EXAMPLE / "projections.sql")
ANN, BEN, CY = 1, 2, 3
DEAL, DOOMED = 10, 11


@pytest.fixture
async def rails_pool(pg_server_url: str) -> AsyncIterator[asyncpg.Pool]:
    async with scratch_database(pg_server_url, "rd_rails") as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute((EXAMPLE / "schema.sql").read_text())
            await migrate(conn, with_messenger=False, keys=BIGINT_KEYS)
            await conn.execute((EXAMPLE / "realtime.sql").read_text())
            await conn.execute(
                "INSERT INTO accounts (id, email) VALUES (1, 'ann@x'), (2, 'ben@x'), (3, 'cy@x');"
                "INSERT INTO conversations (id, subject) VALUES (10, 'Deal'), (11, 'Doomed');"
                "INSERT INTO participations (conversation_id, account_id)"
                " VALUES (10, 1), (10, 2), (10, 3), (11, 1), (11, 2)"
            )
        finally:
            await conn.close()
        async with asyncpg.create_pool(url, min_size=1, max_size=4) as pool:
            yield pool


async def test_the_manifest_holds_on_bigint_keys(rails_pool: asyncpg.Pool) -> None:
    async with rails_pool.acquire() as conn:
        results = await check_manifest(conn, MANIFEST, keys=BIGINT_KEYS)
    declared = {r.name: r.detail for r in results if not r.detail.startswith("disabled")}
    assert declared == {
        **dict.fromkeys(
            ("messages", "read_receipts", "member_chats", "deleted_chats", "member_spans"), "ok"
        ),
        "presence_chats": "not set: presence shows through every active chat (member_chats)",
    }


async def test_each_kind_goes_out_a_deleted_chat_is_gone_a_typo_is_quarantined(
    rails_pool: asyncpg.Pool,
) -> None:
    note = await rails_pool.fetchval(WRITES["post_note"], DEAL, ANN, "hello")
    await rails_pool.execute(WRITES["edit_note"], note, "hello (edited)")
    await rails_pool.execute(WRITES["mark_read"], DEAL, BEN, 1)
    await rails_pool.execute(WRITES["remove_note"], note)
    async with rails_pool.acquire() as conn, conn.transaction():
        await conn.fetchval(WRITES["post_note"], DOOMED, ANN, "doomed")
        await conn.execute("DELETE FROM conversations WHERE id = $1", DOOMED)
    typo = await rails_pool.fetchval(
        "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)"
        " VALUES ('MessageEdited', 'ChatGroup', 99, $1, 1) RETURNING id",
        note,
    )
    stack = make_stack(
        rails_pool, builder=default_payload_builder(manifest=MANIFEST, keys=BIGINT_KEYS)
    )

    report = await stack.dispatcher.run_pass()

    assert (report.dispatched, report.target_gone, report.quarantined) == (4, 1, 1)
    pushes = [(p.group, p.target, p.payload) for p in stack.publisher.pushes]
    assert [(g, t) for g, t, _ in pushes] == [
        ("chat:10", "message_received"),
        ("chat:10", "message_edited"),
        ("chat:10", "read_receipt_updated"),
        ("chat:10", "message_deleted"),
    ]
    received, edited, receipt, deleted = (payload for _, _, payload in pushes)
    # the current state at delivery: the note was removed before the pass
    assert (received["chatId"], received["messageId"], received["senderUserId"]) == (10, note, 1)
    assert "body" not in received
    assert "body" not in edited
    assert (receipt["userId"], receipt["lastReadSeq"]) == (BEN, 1)
    assert deleted["deletedAt"].endswith("Z")
    quarantined = await rails_pool.fetchrow(
        "SELECT status, last_error FROM messenger.realtime_outbox WHERE id = $1", typo
    )
    assert tuple(quarantined) == (
        "Quarantined",
        "PayloadBuildError:TargetMismatch: row targets another chat",
    )
    assert [a.outbox_entry_id for a in stack.alerts.events] == [typo]


async def test_the_span_follows_the_flag_and_a_rejoin_starts_a_new_one(
    rails_pool: asyncpg.Pool,
) -> None:
    spans = "SELECT chat_id, joined_at, left_at FROM (" + (MANIFEST.sql("member_spans") or "")
    spans += ") s WHERE chat_id = 10"
    [(_, joined, left)] = await rails_pool.fetch(spans, CY)
    assert left is None
    await rails_pool.execute(WRITES["set_removed"], DEAL, CY, True)
    [(_, still_joined, removed_at)] = await rails_pool.fetch(spans, CY)
    assert (still_joined, removed_at is not None) == (joined, True)
    await rails_pool.execute("UPDATE participations SET updated_at = now() AT TIME ZONE 'UTC'")
    assert (await rails_pool.fetch(spans, CY))[0]["left_at"] == removed_at  # a touch: nothing
    members = await rails_pool.fetch(MANIFEST.sql("member_chats") or "", [CY])
    assert [r["chat_id"] for r in members] == []
    await rails_pool.execute(WRITES["set_removed"], DEAL, CY, False)
    [(_, rejoined, left)] = await rails_pool.fetch(spans, CY)
    assert left is None
    assert rejoined > removed_at  # the time away is in no span
