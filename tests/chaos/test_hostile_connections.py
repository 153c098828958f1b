"""Hostile connections against a real ``realtime-dispatch hub`` process (docs/RELIABILITY.md,
H28 and H29): pipelined requests that never end, and connections cut mid-work by the
thousand. The hub runs as the CLI runs it (uvloop, its GC tuning); memory is its RSS.

The margins are stated here and hold on a loaded two-core machine: the hub starts at about
90 MB; before the fixes one pipelining connection took it past 500 MB in two seconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.procs import rss_kib
from tests.chaos.harness import base_env, hub_proc, processes, report

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 100
FLOOD_SECONDS = 2.0
FLOOD_GROWTH_MB = 30
"""The hub's RSS during and after a flood stays within this of its RSS before it."""
CHURN_CONNECTS = 2000
CHURN_GROWTH_MB = 15
"""After the churn and a few idle seconds, RSS within this of its RSS after the warm-up."""


async def pipelining(port: int, seconds: float, reads: bool) -> int:
    """One connection writing ``GET /healthz`` a hundred per write for ``seconds``, reading the
    answers or not; then cut. Returns the bytes of answers read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = 0

    async def read() -> None:
        nonlocal got
        while data := await reader.read(1 << 16):
            got += len(data)

    async def write() -> None:
        while True:
            writer.write(REQUESTS)
            await writer.drain()

    tasks = [asyncio.ensure_future(write())]
    if reads:
        tasks.append(asyncio.ensure_future(read()))
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await task
    writer.transport.abort()
    return got


@pytest.mark.parametrize("connections", [1, 10])
@pytest.mark.parametrize("reads", [True, False], ids=["reading", "not-reading"])
async def test_pipelining_floods_leave_the_hub_flat(
    database_url: str, tmp_path: Path, connections: int, reads: bool
) -> None:
    """H28: ``connections`` connections pipelining ``GET /healthz`` for two seconds, reading
    their answers or not: the hub's RSS stays within ``FLOOD_GROWTH_MB`` of where it was,
    ``/healthz`` answers meanwhile, a reading flood is answered all along, and its log has no
    traceback."""
    async with processes() as procs:
        hub = hub_proc(base_env(database_url, REALTIME_LOG_LEVEL="warning"), tmp_path)
        procs.append(hub)
        await hub.start()
        assert hub.port is not None
        assert hub.process is not None
        pid = hub.process.pid
        before = rss_kib(pid)
        peak = before
        floods = [
            asyncio.ensure_future(pipelining(hub.port, FLOOD_SECONDS, reads))
            for _ in range(connections)
        ]
        statuses = []
        async with httpx.AsyncClient(timeout=30) as http:
            while not all(flood.done() for flood in floods):
                statuses.append((await http.get(f"{hub.http_url}/healthz")).status_code)
                peak = max(peak, rss_kib(pid))
                await asyncio.sleep(0.1)
            answered = await asyncio.gather(*floods)
            await asyncio.sleep(0.5)
            statuses.append((await http.get(f"{hub.http_url}/healthz")).status_code)
        after = rss_kib(pid)
        assert await hub.stop() == 0
        log = hub.log_text()
    assert set(statuses) == {200}
    if reads:
        assert all(got > 0 for got in answered)
    assert "Traceback" not in log, log[-3000:]
    growth_mb = (max(peak, after) - before) / 1024
    assert growth_mb < FLOOD_GROWTH_MB, f"RSS grew {growth_mb:.0f} MB"
    report(
        "pipelining flood",
        connections=connections,
        reads=reads,
        rss_mb_before=round(before / 1024, 1),
        rss_growth_mb=round(growth_mb, 1),
        healthz_answers=len(statuses),
    )


async def test_connections_cut_mid_work_give_their_memory_back(database_url: str) -> None:
    """H29: ``CHURN_CONNECTS`` connections opened and cut mid-work (WebSocket, SSE, long
    polling, pipelined HTTP with answers in flight; pushes to their users all along), through
    ``bench/http/connection_churn.py`` (its real path; the bench runs 10,000 and more): every one
    went as planned, the hub's RSS 8 s after the last (past the sweep's 5 s) is within
    ``CHURN_GROWTH_MB`` of its RSS after the first 500, and its log has no traceback."""
    command = [
        sys.executable, "-m", "bench.http.connection_churn", "--dsn", database_url,
        "--connects", str(CHURN_CONNECTS), "--every", "500", "--concurrency", "20",
        "--settle", "8",
    ]  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run, command, cwd=ROOT, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["failures"] == {}
    assert result["hub_tracebacks"] == 0
    assert result["rss_mb_growth_after_idle"] < CHURN_GROWTH_MB, result
    report("connection churn", **{k: v for k, v in result.items() if k != "samples"})
