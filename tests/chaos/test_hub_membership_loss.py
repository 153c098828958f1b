"""The hub's membership LISTEN connection killed (``pg_terminate_backend``) while pushes are
flowing: how long does the hub refuse pushes before its feed is back?

Known bug (docs/RELIABILITY.md, "Findings"), reproduced about every other run: when the kill
lands while a push's membership barrier has its ``SELECT 1`` in flight, asyncpg raises
``InternalClientError`` (not among ``DB_ERRORS`` in ``hub/membership/feed.py``), the push answers
500, and the feed does not notice that its connection is gone until the next health ping
(5 s): every push in between is refused with 503."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.chaos.harness import SERVICE_KEY, base_env, hub_proc, processes, report, scale

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

FAULTS = scale("REALTIME_CHAOS_FAULTS", 3)
KILL_FEED = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'realtime-dispatch-hub-membership'
"""


async def refusal_window(pool: asyncpg.Pool, url: str) -> tuple[float, dict[int, int]]:
    """Kill the feed while pushing continuously; seconds from the kill until pushes are
    accepted again, and the status codes seen."""
    codes: dict[int, int] = {}
    body = {"target": "chat_updated", "arguments": [{"probe": True}]}
    headers = {"Authorization": f"Bearer {SERVICE_KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:

        async def push() -> int:
            answer = await http.post("/api/v1/hubs/messenger/groups/chat:probe", json=body)
            codes[answer.status_code] = codes.get(answer.status_code, 0) + 1
            return answer.status_code

        for _ in range(20):
            assert await push() == 202
        pushing = [asyncio.create_task(push()) for _ in range(8)]
        killed = await pool.fetchval(KILL_FEED)
        assert killed == 1
        at = time.monotonic()
        await asyncio.gather(*pushing)
        ok_streak = 0
        while ok_streak < 20:
            results = await asyncio.gather(*(push() for _ in range(4)))
            ok_streak = ok_streak + 4 if all(code == 202 for code in results) else 0
            assert time.monotonic() - at < 60
        return round(time.monotonic() - at, 3), codes


async def test_membership_feed_killed_mid_push(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    windows = []
    codes: dict[int, int] = {}
    async with processes() as procs:
        hub = hub_proc(base_env(database_url), tmp_path)
        procs.append(hub)
        await hub.start()
        for _ in range(FAULTS):
            window, seen = await refusal_window(pool, hub.http_url)
            windows.append(window)
            for code, n in seen.items():
                codes[code] = codes.get(code, 0) + n
        assert await hub.stop() == 0
    report(
        "hub membership LISTEN connection killed mid-push",
        faults=FAULTS,
        refusal_window_seconds=windows,
        status_codes={str(k): v for k, v in sorted(codes.items())},
        http_500=codes.get(500, 0),
    )
    assert codes.get(500, 0) == 0, codes
    # Reconnect delay 0.5 s plus a resync: well under the 5 s health interval.
    assert max(windows) < 3.0, windows
