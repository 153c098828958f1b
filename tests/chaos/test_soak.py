"""Point 5, opt-in (``pytest tests/chaos/test_soak.py --soak``): a steady load through one
``serve`` process with many connected clients for a long time. Every 10 s it samples the
process's RSS and open file descriptors and the persist-to-push lag p95 of the last window.
Passes when RSS after warm-up stays within 10 %, descriptors do not grow, the lag p95 stays
stable, nothing is lost and every client's timeline is complete after resync.

Defaults are the issue's: 30 minutes at 500 messages/s with 500 clients
(``REALTIME_CHAOS_SOAK_SECONDS``, ``REALTIME_CHAOS_SOAK_RATE``, ``REALTIME_CHAOS_SOAK_CLIENTS``)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import pytest

from realtime_dispatch.messenger import commands
from support.procs import rss_kib
from tests.chaos.harness import (
    Listener,
    base_env,
    check_timelines,
    hub_proc,
    outbox_status,
    processes,
    report,
    scale,
    wait_drained,
    write_messages,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(4 * 3600)]

SECONDS = scale("REALTIME_CHAOS_SOAK_SECONDS", 1800)
RATE = scale("REALTIME_CHAOS_SOAK_RATE", 500)
CLIENTS = scale("REALTIME_CHAOS_SOAK_CLIENTS", 500)
PER_CHAT = 10
SAMPLE_EVERY = 10.0

LAG_P95_SQL = """
SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - created_at))
FROM messenger.realtime_outbox
WHERE status = 'Done' AND updated_at > now() - make_interval(secs => $1)
"""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_soak(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path, soak_enabled: bool
) -> None:
    if not soak_enabled:
        pytest.skip("the soak runs only with --soak")
    users = [uuid4() for _ in range(CLIENTS)]
    chats = []
    members: dict[UUID, set[UUID]] = {}
    async with pool.acquire() as conn:
        for start in range(0, CLIENTS, PER_CHAT):
            sender = uuid4()
            group = users[start : start + PER_CHAT]
            chat = await commands.create_chat(conn, creator=sender, title="soak", members=group)
            chats.append((chat, sender))
            members[chat] = set(group)
    samples: list[dict[str, float]] = []
    async with processes() as procs:
        serve = hub_proc(base_env(database_url), tmp_path, name="serve", command="serve")
        procs.append(serve)
        await serve.start()
        assert serve.process is not None
        pid = serve.process.pid
        listeners = [Listener(user, [serve.ws_url]) for user in users]
        for listener in listeners:
            listener.start()
        try:
            for listener in listeners:
                await asyncio.wait_for(listener.connected.wait(), 120)
            sent = [0]
            total = RATE * SECONDS
            writing = asyncio.create_task(write_messages(pool, chats, total, sent, rate=RATE))
            started = time.monotonic()
            while not writing.done():
                await asyncio.wait({writing}, timeout=SAMPLE_EVERY)
                lag = await pool.fetchval(LAG_P95_SQL, SAMPLE_EVERY)
                samples.append(
                    {
                        "t": round(time.monotonic() - started, 1),
                        "rss_kib": rss_kib(pid),
                        "fds": open_fds(pid),
                        "lag_p95": float(lag or 0.0),
                        "pending": (await outbox_status(pool)).get("Pending", 0),
                    }
                )
            await writing
            status = await wait_drained(pool, within=600)
            totals = await check_timelines(serve.http_url, listeners, chats, pool, members)
        finally:
            for listener in listeners:
                await listener.close()
        assert await serve.stop() == 0
    assert set(status) == {"Done"}, status
    warm = samples[len(samples) // 10 : len(samples) // 10 + max(1, len(samples) // 10)]
    tail = samples[-max(1, len(samples) // 10) :]
    rss_warm = statistics.median(s["rss_kib"] for s in warm)
    rss_tail = statistics.median(s["rss_kib"] for s in tail)
    fds_warm = max(s["fds"] for s in warm)
    fds_tail = max(s["fds"] for s in tail)
    lag_warm = statistics.median(s["lag_p95"] for s in warm)
    lag_tail = statistics.median(s["lag_p95"] for s in tail)
    report(
        "soak through serve",
        seconds=SECONDS,
        rate=RATE,
        clients=CLIENTS,
        messages=RATE * SECONDS,
        rss_kib_warm=rss_warm,
        rss_kib_tail=rss_tail,
        fds_warm=fds_warm,
        fds_tail=fds_tail,
        lag_p95_warm=lag_warm,
        lag_p95_tail=lag_tail,
        repeated_pushes=totals["repeated_pushes"],
        recovered_by_resync=totals["recovered_by_resync"],
        client_reconnects=totals["client_reconnects"],
        samples=samples,
        outbox=status,
    )
    assert abs(rss_tail - rss_warm) <= 0.10 * rss_warm, (rss_warm, rss_tail)
    assert fds_tail <= fds_warm + 5, (fds_warm, fds_tail)
    assert lag_tail <= 2 * lag_warm + 0.1, (lag_warm, lag_tail)
