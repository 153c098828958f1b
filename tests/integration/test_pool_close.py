"""A pool closes within its deadline on the way out: a connection held by a stuck query is
terminated (with a log line) rather than keeping a stopped process alive; a pool whose
connections are all back closes gracefully."""

import asyncio

import asyncpg
import pytest
from structlog.testing import capture_logs

from realtime_dispatch.database.connections import close_pool, create_pool


async def test_a_connection_held_by_a_stuck_query_is_terminated(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    started = asyncio.Event()

    async def stuck() -> None:
        async with pool.acquire() as conn:
            started.set()
            await conn.execute("SELECT pg_sleep(60)")

    holder = asyncio.create_task(stuck())
    await started.wait()
    with capture_logs() as logs:
        async with asyncio.timeout(20):  # without the deadline close() waits for the query
            await close_pool(pool, within=0.5)
    assert [e["event"] for e in logs] == ["pool_close_timeout"]
    with pytest.raises((asyncpg.InterfaceError, asyncpg.ConnectionDoesNotExistError)):
        await holder
    assert pool.is_closing()
    # The server's backend sleeps on until it next writes; end it so nothing outlives the test.
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = 'SELECT pg_sleep(60)'"
        )
    finally:
        await conn.close()


async def test_a_pool_with_every_connection_back_closes_quietly(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=2, max_size=2)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT 1") == 1
    with capture_logs() as logs:
        await close_pool(pool, within=5)
    assert logs == []
    assert pool.is_closing()
