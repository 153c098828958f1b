"""The claim statement: index use, plan caching, and its SQL backoff against the Python policy."""

import asyncpg
import pytest

from realtime_dispatch.database.connections import DISPATCHER_SERVER_SETTINGS, create_pool
from realtime_dispatch.outbox.backoff import JITTER, backoff_delay
from realtime_dispatch.outbox.queries import QUERIES

FILL_SQL = """
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id, status,
                                       created_at)
SELECT messenger.realtime_new_id(), 'ContactRemoved', 'User', gen_random_uuid(), gen_random_uuid(),
       CASE WHEN g % 50 = 0 THEN 'Pending' ELSE 'Done' END, now()
FROM generate_series(1, $1) AS g
"""
CLAIM_ARGS = (200, 2.0, 2.0, 120.0, JITTER, [], 1, 0)


async def test_claim_uses_an_index_not_a_table_scan(pool: asyncpg.Pool) -> None:
    await pool.execute(FILL_SQL, 20_000)
    await pool.execute("ANALYZE messenger.realtime_outbox")
    async with pool.acquire() as conn, conn.transaction():
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {QUERIES['claim']}", *CLAIM_ARGS))
    assert "Seq Scan on realtime_outbox" not in plan, plan
    assert "Index" in plan, plan
    assert "ix_rto_pending_id" in plan or "ix_rto_due" in plan, plan


async def test_dispatcher_connections_never_use_a_generic_claim_plan(database_url: str) -> None:
    """asyncpg prepares statements; a generic plan built while the table was empty re-runs the
    locking subquery per row. The dispatcher's sessions force custom plans."""
    dispatcher_pool = await create_pool(
        database_url, max_size=1, server_settings=DISPATCHER_SERVER_SETTINGS
    )
    try:
        async with dispatcher_pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
            for round_ in range(8):  # the server considers a generic plan after 5 executions
                if round_ == 4:
                    await conn.execute(FILL_SQL.replace("$1", "5000"))
                await conn.fetch(QUERIES["claim"], *CLAIM_ARGS)
            stats = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%SKIP LOCKED%' AND statement NOT LIKE '%pg_prepared%'"
            )
        assert stats is not None
        assert stats["generic_plans"] == 0
        assert stats["custom_plans"] >= 8
    finally:
        await dispatcher_pool.close()


async def test_default_sessions_would_switch_to_a_generic_plan(pool: asyncpg.Pool) -> None:
    """The contrast that makes the test above meaningful."""
    async with pool.acquire() as conn:
        for _ in range(8):
            await conn.fetch(QUERIES["claim"], *CLAIM_ARGS)
        generic = await conn.fetchval(
            "SELECT generic_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%SKIP LOCKED%' AND statement NOT LIKE '%pg_prepared%'"
        )
    assert generic > 0


STALE_PLAN_SQL = """
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id)
SELECT messenger.realtime_new_id(), 'ContactRemoved', 'User', gen_random_uuid(), gen_random_uuid()
FROM generate_series(1, 3000);
UPDATE messenger.realtime_outbox SET status = 'Done';
INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id)
SELECT messenger.realtime_new_id(), 'ContactRemoved', 'User', gen_random_uuid(), gen_random_uuid()
FROM generate_series(1, 5);
"""


async def claim_plan(conn: asyncpg.Connection) -> str:
    async with conn.transaction():
        rows = await conn.fetch(f"EXPLAIN {QUERIES['claim']}", *CLAIM_ARGS)
    return "\n".join(r[0] for r in rows)


async def test_the_claim_walks_the_pending_index_even_with_stale_statistics(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Statistics taken while the table was empty, then thousands of rows that came and went
    (autovacuum behind): the planner's own choice is ix_rto_due and a sort (a bitmap scan on
    PostgreSQL 15, which re-reads every dead entry on each claim; a plain index scan on later
    versions), which must read every due row before the first can be returned. The dispatcher's
    sessions walk ix_rto_pending_id in order."""
    await pool.execute("ANALYZE messenger.realtime_outbox")
    await pool.execute(STALE_PLAN_SQL)
    async with pool.acquire() as conn:
        default_plan = await claim_plan(conn)
    assert "ix_rto_due" in default_plan, default_plan  # the contrast
    dispatcher_pool = await create_pool(
        database_url, max_size=1, server_settings=DISPATCHER_SERVER_SETTINGS
    )
    try:
        async with dispatcher_pool.acquire() as conn:
            plan = await claim_plan(conn)
            assert len(await conn.fetch(QUERIES["claim"], *CLAIM_ARGS)) == 5
    finally:
        await dispatcher_pool.close()
    assert "Index Scan using ix_rto_pending_id" in plan, plan
    assert "Bitmap" not in plan, plan
    assert "ix_rto_due" not in plan, plan
    assert "JIT" not in plan, plan  # the disabled sort's cost must not switch JIT on


@pytest.mark.parametrize("attempts_before", [0, 1, 3, 6, 40])
async def test_sql_backoff_matches_the_python_policy(
    pool: asyncpg.Pool, attempts_before: int
) -> None:
    await pool.execute(
        "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id,"
        " attempts) VALUES (messenger.realtime_new_id(), 'ContactRemoved', 'User',"
        " gen_random_uuid(), gen_random_uuid(), $1)",
        attempts_before,
    )
    async with pool.acquire() as conn, conn.transaction():
        [claimed] = await conn.fetch(QUERIES["claim"], 10, 2.0, 2.0, 120.0, JITTER, [], 1, 0)
        delay = await conn.fetchval(
            "SELECT extract(epoch FROM next_attempt_at - now()) FROM messenger.realtime_outbox"
        )
    attempt = attempts_before + 1
    assert claimed["attempts"] == attempt
    longest = backoff_delay(attempt, base=2.0, factor=2.0, cap=120.0, rand=lambda: 0.0)
    shortest = backoff_delay(attempt, base=2.0, factor=2.0, cap=120.0, rand=lambda: 1.0)
    assert shortest - 1e-6 <= delay <= longest + 1e-6
