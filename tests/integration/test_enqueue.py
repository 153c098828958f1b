from uuid import uuid4

import asyncpg
import pytest

from realtime_dispatch import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind, enqueue
from realtime_dispatch.errors import IntentError
from realtime_dispatch.messenger import commands
from tests.integration.support import new_chat, row


def contact_intent() -> OutboxIntent:
    return OutboxIntent(
        RealtimeDispatchKind.CONTACT_REQUEST_RECEIVED,
        RealtimeTargetKind.USER,
        target_user_id=uuid4(),
        ref_id=uuid4(),
    )


async def test_enqueue_writes_in_callers_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        [entry] = await enqueue(conn, contact_intent())
    r = await row(pool, entry)
    assert (r["status"], r["attempts"], r["kind"], r["target_kind"]) == (
        "Pending",
        0,
        "ContactRequestReceived",
        "User",
    )
    assert entry.version == 7


async def test_rollback_takes_the_intent_with_it(pool: asyncpg.Pool) -> None:
    class Boom(Exception):
        pass

    async def failing_command() -> None:
        async with pool.acquire() as conn, conn.transaction():
            await enqueue(conn, contact_intent())
            raise Boom

    with pytest.raises(Boom):
        await failing_command()
    assert await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox") == 0


async def test_enqueue_refuses_to_run_outside_a_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(IntentError, match="inside the owner's transaction"):
            await enqueue(conn, contact_intent())


async def test_ids_are_in_insertion_order(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        ids = await enqueue(conn, *(contact_intent() for _ in range(50)))
    assert ids == sorted(ids)


async def test_send_message_writes_message_and_intent_together(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    async with pool.acquire() as conn:
        sent = await commands.send_message(conn, chat_id=chat, sender=sender, body="x")
        with pytest.raises(commands.Forbidden):
            await commands.send_message(conn, chat_id=chat, sender=uuid4(), body="y")
    r = await row(pool, sent.outbox_id)
    assert (r["chat_id"], r["message_id"], r["seq"]) == (chat, sent.message_id, 1)
    assert await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox") == 1
    assert await pool.fetchval("SELECT count(*) FROM messenger.messages") == 1
