"""Every kind is produced by an owner command, in the command's own transaction: the scenario's
steps, one by one, against a real PostgreSQL and no dispatcher."""

from __future__ import annotations

from uuid import UUID

import asyncpg
import pytest

from realtime_dispatch.outbox.model import RealtimeDispatchKind
from tests.integration.messenger_scenario import (
    DOMAIN_TABLE,
    STEPS,
    Ctx,
    domain_snapshot,
    expected_shape,
    kinds_covered,
    last_id,
    new_rows,
    row_shape,
)

FAIL_OUTBOX = """
CREATE FUNCTION messenger.test_refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'outbox insert refused by test'; END $$;
CREATE TRIGGER trg_test_refuse BEFORE INSERT ON messenger.realtime_outbox
    FOR EACH ROW EXECUTE FUNCTION messenger.test_refuse_outbox();
"""
ALLOW_OUTBOX = """
DROP TRIGGER trg_test_refuse ON messenger.realtime_outbox;
DROP FUNCTION messenger.test_refuse_outbox();
"""


def test_the_scenario_covers_all_26_kinds() -> None:
    assert kinds_covered() == set(RealtimeDispatchKind)
    assert len(set(RealtimeDispatchKind)) == 26


async def test_each_command_writes_its_rows_in_its_own_transaction(pool: asyncpg.Pool) -> None:
    ctx = Ctx(pool)
    await ctx.setup()
    # Creating the chat pushes its ChatCreated chat event to the chat, in the same transaction.
    [created] = await new_rows(pool, UUID(int=0))
    assert [row_shape(created)] == expected_shape(
        [(RealtimeDispatchKind.CHAT_UPDATED, ctx.chat, None)]
    )
    assert created["ref_id"] == created["id"]  # the chat event's id is the row's
    event = await pool.fetchrow(
        "SELECT xmin::text, event_kind, actor_user_id, subject_user_id FROM messenger.chat_events"
        " WHERE id = $1",
        created["ref_id"],
    )
    assert tuple(event) == (created["xmin"], "ChatCreated", ctx.alice, None)
    chat_xmin = await pool.fetchval(
        "SELECT xmin::text FROM messenger.chats WHERE id = $1", ctx.ids["chat"]
    )
    assert chat_xmin == created["xmin"]
    for step in STEPS:
        before = await last_id(pool)
        async with pool.acquire() as conn:
            await step.run(ctx, conn)
        rows = await new_rows(pool, before)
        assert [row_shape(r) for r in rows] == expected_shape(step.expect(ctx)), step.name
        for r in rows:
            kind = RealtimeDispatchKind(r["kind"])
            ref = r["message_id"] if kind.is_message else r["ref_id"]
            domain_xmin = await pool.fetchval(
                f"SELECT xmin::text FROM messenger.{DOMAIN_TABLE[kind]} WHERE id = $1", ref
            )
            # Same writing transaction id: the domain change and its push commit together.
            assert domain_xmin == r["xmin"], step.name
            assert r["message_id"] is None or kind.is_message


async def test_a_failing_outbox_insert_rolls_the_whole_command_back(pool: asyncpg.Pool) -> None:
    ctx = Ctx(pool)
    await ctx.setup()
    for step in STEPS:
        state, mark = await domain_snapshot(pool), await last_id(pool)
        await pool.execute(FAIL_OUTBOX)
        try:
            async with pool.acquire() as conn:
                with pytest.raises(asyncpg.RaiseError, match="refused by test"):
                    await step.run(ctx, conn)
        finally:
            await pool.execute(ALLOW_OUTBOX)
        assert await domain_snapshot(pool) == state, step.name
        assert await new_rows(pool, mark) == []
        async with pool.acquire() as conn:  # the same command succeeds once the outbox takes it
            await step.run(ctx, conn)
        assert len(await new_rows(pool, mark)) == len(step.expect(ctx)), step.name


async def test_outbox_rows_carry_ids_and_enums_only(pool: asyncpg.Pool) -> None:
    ctx = Ctx(pool)
    await ctx.setup()
    for step in STEPS:
        async with pool.acquire() as conn:
            await step.run(ctx, conn)
    text_columns = await pool.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'messenger'"
        " AND table_name = 'realtime_outbox' AND data_type IN ('text', 'character varying')"
    )
    assert {c["column_name"] for c in text_columns} == {
        "kind", "target_kind", "session_kind", "status", "last_error",
    }  # fmt: skip
    values = await pool.fetch(
        "SELECT DISTINCT kind, target_kind, session_kind, last_error FROM messenger.realtime_outbox"
    )
    assert {v["kind"] for v in values} == {k.value for k in RealtimeDispatchKind}
    assert {v["target_kind"] for v in values} == {"ChatGroup", "User"}
    assert {v["session_kind"] for v in values} == {None, "Direct", "Conference"}
    assert {v["last_error"] for v in values} == {None}
