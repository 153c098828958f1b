"""One pipeline under test: hub process(es), worker process(es), listeners connected, owners
writing at a steady rate while a fault is injected; then drain, resync and check."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from tests.chaos.harness import (
    RETRYABLE,
    Listener,
    Proc,
    base_env,
    check_timelines,
    hub_proc,
    make_chats,
    message_rows_status,
    outbox_status,
    processes,
    wait_drained,
    worker_proc,
    write_messages,
)

LOCK_HOLDERS_SQL = """
SELECT array_agg(pid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint)
      = hashtextextended('job:scheduled:messenger-realtime-dispatch', 0)
"""


@dataclass
class Pipeline:
    pool: asyncpg.Pool
    env: dict[str, str]
    hubs: list[Proc]
    workers: list[Proc]
    listeners: list[Listener]
    chats: list[tuple[UUID, UUID]]
    sent: list[int] = field(default_factory=lambda: [0])
    lock_samples: int = 0
    max_lock_holders: int = 0


async def sample_lock(pipeline: Pipeline, stop: asyncio.Event) -> None:
    """Watch the single-runner lock all run long: never two holders at once."""
    while not stop.is_set():
        with contextlib.suppress(*RETRYABLE):
            holders = await pipeline.pool.fetchval(LOCK_HOLDERS_SQL) or []
            pipeline.lock_samples += 1
            pipeline.max_lock_holders = max(pipeline.max_lock_holders, len(holders))
        await asyncio.sleep(0.01)


async def run_pipeline(
    pool: asyncpg.Pool,
    database_url: str,
    log_dir: Path,
    inject: Callable[[Pipeline], Awaitable[Any]],
    *,
    messages: int,
    rate: float,
    workers: int = 1,
    hubs: int = 1,
    env_extra: dict[str, str] | None = None,
    backplane_redis: str | None = None,
    drain_within: float = 180,
) -> tuple[Pipeline, Any, dict[str, int], dict[str, int]]:
    """Returns the pipeline, what ``inject`` returned, the status of the message rows at the
    end (the chats' creation pushes checked apart: each Done, once) and the client totals (live
    pushes, repeated pushes, recovered by resync)."""
    env = base_env(database_url, **(env_extra or {}))
    if backplane_redis:
        env.update(REALTIME_BACKPLANE_ENABLED="true", REALTIME_REDIS_URL=backplane_redis)
    users = [uuid4(), uuid4()]
    chats = await make_chats(pool, 4, users)
    async with processes() as procs:
        hub_procs = [hub_proc(env, log_dir, name=f"hub{i}") for i in range(hubs)]
        for hub in hub_procs:
            procs.append(hub)
            await hub.start()
        worker_env = dict(env)
        if not backplane_redis:
            worker_env["REALTIME_HUB_URL"] = hub_procs[0].http_url
        worker_procs = [worker_proc(worker_env, log_dir, name=f"worker{i}") for i in range(workers)]
        for worker in worker_procs:
            procs.append(worker)
            await worker.start()
        urls = [hub.ws_url for hub in hub_procs]
        listeners = [
            Listener(user, urls[i % len(urls) :] + urls[: i % len(urls)])
            for i, user in enumerate(users)
        ]
        pipeline = Pipeline(pool, env, hub_procs, worker_procs, listeners, chats)
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(sample_lock(pipeline, stop_sampling))
        for listener in listeners:
            listener.start()
        try:
            for listener in listeners:
                await asyncio.wait_for(listener.connected.wait(), 30)
            writing = asyncio.create_task(
                write_messages(pool, chats, messages, pipeline.sent, rate=rate)
            )
            try:
                injected = await inject(pipeline)
                await writing
            finally:
                if not writing.done():
                    writing.cancel()
            await wait_drained(pool, within=drain_within)
            quarantined = await pool.fetch(
                "SELECT kind, attempts, last_error, count(*) AS n"
                " FROM messenger.realtime_outbox WHERE status = 'Quarantined'"
                " GROUP BY 1, 2, 3"
            )
            assert not quarantined, [dict(r) for r in quarantined]
            status = await message_rows_status(pool, chats)
            for listener in listeners:
                await asyncio.wait_for(listener.connected.wait(), 60)
            alive_hub = next(hub for hub in hub_procs if hub.alive)
            totals = await check_timelines(alive_hub.http_url, listeners, chats, pool)
        finally:
            stop_sampling.set()
            await sampler
            for listener in listeners:
                await listener.close()
        for proc in [*worker_procs, *hub_procs]:
            if proc.alive:
                assert await proc.stop() == 0, proc.log_text()[-2000:]
    assert pipeline.max_lock_holders <= 1
    return pipeline, injected, status, totals


async def tolerant_status(pool: asyncpg.Pool) -> dict[str, int]:
    """Outbox status, or empty while the database is unreachable."""
    try:
        return await outbox_status(pool)
    except RETRYABLE:
        return {}


async def time_to_progress(pool: asyncpg.Pool, since: float, within: float = 120) -> float:
    """Seconds from ``since`` until a row becomes Done (or nothing is pending)."""
    before = (await tolerant_status(pool)).get("Done", 0)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        status = await tolerant_status(pool)
        if status and (status.get("Done", 0) > before or status.get("Pending", 0) == 0):
            return round(time.monotonic() - since, 3)
        await asyncio.sleep(0.01)
    raise AssertionError("no progress after the fault")
