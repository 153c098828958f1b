"""Scale-out under faults, through real processes: three ``hub`` replicas on the interest-routed
backplane (a 3-node Redis Cluster of the test's own) and two ``worker``s sharing four partitions,
while owners write. Each scenario kills one thing with -9 (a backplane node, a worker holding
partitions, a hub replica) or changes the partition count on the live system, then checks that
every client's timeline of every chat is complete after resync and reports the figures."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import asyncpg
import pytest

from tests.chaos.harness import (
    Listener,
    Proc,
    base_env,
    check_timelines,
    delivery_figures,
    hub_proc,
    make_chats,
    outbox_status,
    processes,
    report,
    scale,
    wait_drained,
    worker_proc,
)
from tests.cluster import LocalRedisCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

MESSAGES = scale("REALTIME_CHAOS_SCALEOUT_MESSAGES", 600)
RATE = scale("REALTIME_CHAOS_RATE", 150)
LISTENERS = 3
CHATS = 6


@dataclass
class Cluster:
    redis: LocalRedisCluster
    hubs: list[Proc]
    workers: list[Proc]
    listeners: list[Listener]
    env: dict[str, str]
    log_dir: Path
    started: list[Proc]


@contextlib.asynccontextmanager
async def scaleout(database_url: str, log_dir: Path) -> AsyncIterator[Cluster]:
    redis = LocalRedisCluster().start()
    try:
        env = base_env(
            database_url,
            REALTIME_BACKPLANE="redis-cluster",
            REALTIME_REDIS_URL=redis.url,
            REALTIME_DISPATCH_PARTITIONS="4",
        )
        async with processes() as started:
            hubs = [hub_proc(env, log_dir, f"hub{i}") for i in range(3)]
            workers = [worker_proc(env, log_dir, f"worker{i}") for i in range(2)]
            for proc in hubs + workers:
                started.append(proc)
                await proc.start()
            # Each listener prefers its own replica and moves on to the next if it goes away.
            listeners = [
                Listener(uuid4(), [h.ws_url for h in hubs[i:] + hubs[:i]]) for i in range(3)
            ]
            for listener in listeners:
                listener.start()
            try:
                for listener in listeners:
                    await asyncio.wait_for(listener.connected.wait(), 20)
                yield Cluster(redis, hubs, workers, listeners, env, log_dir, started)
            finally:
                for listener in listeners:
                    await listener.close()
    finally:
        redis.stop()


async def run_with_fault(
    pool: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scenario: str,
    fault: Callable[[Cluster], Awaitable[dict[str, float]]],
) -> None:
    async with scaleout(database_url, tmp_path) as cluster:
        chats = await make_chats(pool, CHATS, [listener.user for listener in cluster.listeners])
        sent = [0]
        writer = asyncio.create_task(_write(pool, chats, sent))
        await _wait_for(lambda: sent[0] >= MESSAGES // 4)
        figures = await fault(cluster)
        await writer
        status = await wait_drained(pool, within=120)
        totals = await check_timelines(cluster.hubs[0].http_url, cluster.listeners, chats, pool)
        # A listener on a surviving replica may need a moment for the last pushes; resync
        # above already proved completeness, so this is only for the report.
        report(
            scenario,
            messages=sent[0],
            outbox=status,
            **figures,
            **delivery_figures(totals),
        )
        assert status.get("Quarantined", 0) == 0
        assert status.get("Done", 0) == await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox"
        )


async def _write(pool: asyncpg.Pool, chats: list, sent: list[int]) -> None:
    from tests.chaos.harness import write_messages

    await write_messages(pool, chats, MESSAGES, sent, rate=RATE)


async def _wait_for(predicate: Callable[[], bool], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def _progress_after(pool: asyncpg.Pool, since: float, within: float = 60) -> float:
    """Seconds from ``since`` until another row reaches Done (or nothing is left Pending)."""
    before = (await outbox_status(pool)).get("Done", 0)
    deadline = time.monotonic() + within
    while True:
        status = await outbox_status(pool)
        if status.get("Done", 0) > before or status.get("Pending", 0) == 0:
            return time.monotonic() - since
        assert time.monotonic() < deadline, "no progress"
        await asyncio.sleep(0.02)


async def test_backplane_node_killed(pool: asyncpg.Pool, database_url: str, tmp_path) -> None:
    async def fault(cluster: Cluster) -> dict[str, float]:
        cluster.redis.kill_node(1)
        await asyncio.sleep(2.0)  # a third of the slots unserved: those pushes are retried
        restarted = time.monotonic()
        cluster.redis.start_node(1)
        return {"recovered_after_restart_s": round(await _progress_after(pool, restarted), 3)}

    await run_with_fault(pool, database_url, tmp_path, "scaleout_backplane_node_kill9", fault)


async def test_worker_holding_partitions_killed(
    pool: asyncpg.Pool, database_url: str, tmp_path
) -> None:
    async def fault(cluster: Cluster) -> dict[str, float]:
        killed = time.monotonic()
        await cluster.workers[0].kill()
        return {"progress_after_kill_s": round(await _progress_after(pool, killed), 3)}

    await run_with_fault(pool, database_url, tmp_path, "scaleout_worker_kill9", fault)


async def test_hub_replica_killed(pool: asyncpg.Pool, database_url: str, tmp_path) -> None:
    async def fault(cluster: Cluster) -> dict[str, float]:
        killed = time.monotonic()
        await cluster.hubs[1].kill()
        moved = cluster.listeners[1]  # its first choice was hub 1
        await _wait_for(lambda: moved.connected.is_set() and moved.connects >= 2, within=30)
        return {"listener_back_after_s": round(time.monotonic() - killed, 3)}

    await run_with_fault(pool, database_url, tmp_path, "scaleout_hub_kill9", fault)


async def test_partition_count_changed_while_writing(
    pool: asyncpg.Pool, database_url: str, tmp_path
) -> None:
    """A rolling change from four partitions to eight: two new workers start with eight, then
    the two old ones stop."""

    async def fault(cluster: Cluster) -> dict[str, float]:
        env = {**cluster.env, "REALTIME_DISPATCH_PARTITIONS": "8"}
        fresh = [worker_proc(env, cluster.log_dir, f"worker8-{i}") for i in range(2)]
        for proc in fresh:
            cluster.started.append(proc)
            await proc.start()
        for proc in cluster.workers:
            assert await proc.stop() == 0
        changed = time.monotonic()
        return {"progress_after_change_s": round(await _progress_after(pool, changed), 3)}

    await run_with_fault(pool, database_url, tmp_path, "scaleout_partitions_4_to_8", fault)
