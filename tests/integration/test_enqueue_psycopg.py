"""The driver-neutral enqueue form, run by psycopg (a synchronous owner) in its own transaction."""

from uuid import uuid4

import asyncpg
import psycopg

from realtime_dispatch import (
    OutboxIntent,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    enqueue_statement,
)
from tests.integration.support import make_stack


async def test_psycopg_owner_enqueues_in_its_transaction(
    pool: asyncpg.Pool, database_url: str
) -> None:
    user = uuid4()
    intent = OutboxIntent(
        RealtimeDispatchKind.CONTACT_REMOVED,
        RealtimeTargetKind.USER,
        target_user_id=user,
        ref_id=uuid4(),
    )
    statement = enqueue_statement(intent)
    with psycopg.connect(database_url) as conn:
        with conn.transaction():
            conn.execute(statement.sql, statement.params)
        rolled_back = enqueue_statement(intent)
        try:
            with conn.transaction():
                conn.execute(rolled_back.sql, rolled_back.params)
                raise RuntimeError("owner failed")
        except RuntimeError:
            pass
    rows = await pool.fetch(
        "SELECT id, kind, target_user_id, status FROM messenger.realtime_outbox"
    )
    assert [(r["id"], r["kind"], r["target_user_id"], r["status"]) for r in rows] == [
        (statement.params["id"], "ContactRemoved", user, "Pending")
    ]
    # The dispatcher claims it like any row an asyncpg owner wrote.
    report = await make_stack(pool).dispatcher.run_pass()
    assert report.claimed == 1
