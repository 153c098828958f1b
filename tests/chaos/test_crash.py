"""Point 1: ``kill -9`` of the worker and of ``serve`` in the middle of a long run.

Owners keep committing messages (domain row + outbox row in one transaction) while the
dispatcher process is killed repeatedly and restarted. Afterwards every outbox row is Done, none
Quarantined, and every client's timeline of every chat is 1..lastSeq without duplicates after a
REST resync; repeated pushes (the price of at-least-once) are counted and reported.

CI runs a small version; the documented run is
``REALTIME_CHAOS_MESSAGES=20000 REALTIME_CHAOS_KILLS=20 REALTIME_CHAOS_RATE=400
pytest tests/chaos/test_crash.py``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from uuid import uuid4

import asyncpg
import pytest

from support.procs import wait_until
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
    write_messages,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

MESSAGES = scale("REALTIME_CHAOS_MESSAGES", 600)
KILLS = scale("REALTIME_CHAOS_KILLS", 3)
RATE = scale("REALTIME_CHAOS_RATE", 150)  # owner commits per second


async def done_count(pool: asyncpg.Pool) -> int:
    return (await outbox_status(pool)).get("Done", 0)


async def kill_repeatedly(
    pool: asyncpg.Pool, victim: Proc, sent: list[int], total: int, kills: int
) -> tuple[list[int], list[float]]:
    """Kill ``victim`` ``kills`` times, spread over the run, each time while rows are pending
    (mid-batch); restart it at once. Returns rows in flight at each kill and the time from each
    kill to the next Done row written after the restart."""
    in_flight: list[int] = []
    recovery: list[float] = []
    for i in range(kills):
        threshold = total * (i + 1) // (kills + 1)
        await wait_until(lambda t=threshold: sent[0] >= t, within=600, interval=0.02)

        async def busy() -> bool:
            return (await outbox_status(pool)).get("Pending", 0) > 0

        if sent[0] < total:  # kill while rows are claimed or due (mid-batch)
            await wait_until(busy, within=30, interval=0.005)
        pending = (await outbox_status(pool)).get("Pending", 0)
        done_before = await done_count(pool)
        killed_at = time.monotonic()
        await victim.kill()
        await victim.start()

        async def progressed(before: int = done_before) -> bool:
            status = await outbox_status(pool)
            return status.get("Done", 0) > before or status.get("Pending", 0) == 0

        await wait_until(progressed, within=120, interval=0.01)
        in_flight.append(pending)
        recovery.append(round(time.monotonic() - killed_at, 3))
    return in_flight, recovery


async def run_crash_scenario(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path, *, kill_serve: bool
) -> None:
    listeners_users = [uuid4(), uuid4()]
    chats = await make_chats(pool, 4, listeners_users)
    env = base_env(database_url)
    async with processes() as procs:
        if kill_serve:
            front = hub_proc(env, tmp_path, name="serve", command="serve")
            victim = front
            procs.append(front)
            await front.start()
        else:
            front = hub_proc(env, tmp_path)
            procs.append(front)
            await front.start()
            victim = worker_proc({**env, "REALTIME_HUB_URL": front.http_url}, tmp_path)
            procs.append(victim)
            await victim.start()
        listeners = [Listener(user, [front.ws_url]) for user in listeners_users]
        for listener in listeners:
            listener.start()
        try:
            for listener in listeners:
                await asyncio.wait_for(listener.connected.wait(), 30)
            sent = [0]
            started = time.monotonic()
            writing = asyncio.create_task(write_messages(pool, chats, MESSAGES, sent, rate=RATE))
            try:
                in_flight, recovery = await kill_repeatedly(pool, victim, sent, MESSAGES, KILLS)
                await writing
            finally:
                if not writing.done():
                    writing.cancel()
            status = await wait_drained(pool, within=300)
            elapsed = time.monotonic() - started
            for listener in listeners:
                await asyncio.wait_for(listener.connected.wait(), 30)
            totals = await check_timelines(front.http_url, listeners, chats, pool)
        finally:
            for listener in listeners:
                await listener.close()
        assert victim.starts == KILLS + 1
        assert await victim.stop() == 0
        if not kill_serve:
            assert await front.stop() == 0
    assert status.get("Quarantined", 0) == 0, status
    assert set(status) == {"Done"}, status
    report(
        "kill -9 serve" if kill_serve else "kill -9 worker",
        messages=MESSAGES,
        owner_rate_per_second=RATE,
        kills=KILLS,
        clients=len(listeners_users),
        chats=len(chats),
        in_flight_at_kill=in_flight,
        max_in_flight=max(in_flight, default=0),
        **delivery_figures(totals),
        hub_slow_consumer_closes=front.log_text().count("slow_consumer"),
        recovery_seconds=recovery,
        max_recovery_seconds=max(recovery, default=0),
        elapsed_seconds=round(elapsed, 1),
        outbox=status,
    )


async def test_worker_killed_repeatedly_mid_batch_loses_nothing(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    await run_crash_scenario(pool, database_url, tmp_path, kill_serve=False)


async def test_serve_killed_repeatedly_mid_batch_loses_nothing(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    await run_crash_scenario(pool, database_url, tmp_path, kill_serve=True)
