"""Sync replays against a victim: does ``GET /api/sync`` from an old cursor, 20 at a time at 1M
outbox rows that are not the callers', slow down another user's REST post and WebSocket
connect?

    python bench/sync_replay.py [--dsn DSN] [--rows 1000000] [--replays 20] [--samples 40]
                                [--unbounded] [--smoke]

A ``realtime-dispatch serve`` on a scratch database ``bench_replay_*`` (dropped at the end).
``--replays`` attackers (one user each, in no chat) take a cursor, then ``--rows`` Done rows of
another user's chat are written (``INSERT … SELECT generate_series``, 20 transactions). The
victim posts ``--samples`` messages one after another and opens ``--samples`` WebSocket
connections (negotiate skipped; upgrade, handshake, answer), first idle, then while every
attacker replays its old cursor in a loop (the same cursor again and again, as a hostile
client would). It reports the victim's p50 / p95 in both phases, their ratio, and what the
attackers got (200 / 429 / 503). ``--unbounded`` lifts the sync bounds (a scan bound of 10M
rows, a 60 s timeout, 1,000 pages per user, a sync pool of 10) to show what they hold off, in
the same sitting. Writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import jwt
from websockets.asyncio.client import connect

from _common import (
    DEFAULT_DSN,
    free_port,
    machine,
    parse_with_smoke,
    print_table,
    scratch_database,
    write_json,
)

SECRET = "bench-sync-replay-secret-0123456789abcdef"
RS = "\x1e"
SEED = """
INSERT INTO messenger.realtime_outbox
    (id, kind, target_kind, chat_id, message_id, seq, status, created_at)
SELECT messenger.realtime_new_id(), 'MessageReceived', 'ChatGroup', $1, gen_random_uuid(), g,
       'Done', now()
FROM generate_series($2::int, $3::int) g
"""
UNBOUNDED = {
    "REALTIME_SYNC_SCAN_LIMIT": "10000000",
    "REALTIME_SYNC_STATEMENT_TIMEOUT": "60",
    "REALTIME_SYNC_MAX_PER_USER": "1000",
    "REALTIME_SYNC_POOL_SIZE": "10",
}


def token(user: UUID) -> str:
    return jwt.encode({"sub": str(user), "exp": int(time.time()) + 7200}, SECRET, "HS256")


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
    }


async def victim(http: httpx.AsyncClient, ws_url: str, chat: str, user: UUID, n: int) -> Any:
    auth = {"Authorization": f"Bearer {token(user)}"}
    posts, connects = [], []
    for i in range(n):
        started = time.perf_counter()
        r = await http.post(f"/api/chats/{chat}/messages", json={"body": f"v{i}"}, headers=auth)
        posts.append((time.perf_counter() - started) * 1000)
        assert r.status_code == 201, r.text
        started = time.perf_counter()
        async with connect(f"{ws_url}?access_token={token(user)}", ping_interval=None) as ws:
            await ws.send('{"protocol":"json","version":1}' + RS)
            assert await ws.recv() == "{}" + RS
            connects.append((time.perf_counter() - started) * 1000)
    return quantiles(posts), quantiles(connects)


async def attacker(
    http: httpx.AsyncClient, user: UUID, cursor: str, stop: asyncio.Event, seen: Counter[int]
) -> None:
    auth = {"Authorization": f"Bearer {token(user)}"}
    while not stop.is_set():
        r = await http.get("/api/sync", params={"since": cursor}, headers=auth)
        seen[r.status_code] += 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with scratch_database(args.dsn, "replay") as url:
        port = free_port()
        env = {
            **os.environ,
            "REALTIME_DATABASE_URL": url,
            "REALTIME_HUB_JWT_SECRET": SECRET,
            "REALTIME_API_SEND_RATE": "1000",  # the victim posts as fast as it is answered
            "REALTIME_API_SEND_BURST": "1000",
            "REALTIME_LOG_LEVEL": "warning",
            **(UNBOUNDED if args.unbounded else {}),
        }
        serve = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "realtime_dispatch.cli.main", "serve",
            "--host", "127.0.0.1", "--port", str(port), env=env,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base, timeout=120) as http:
                for _ in range(300):
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
                attackers = [uuid4() for _ in range(args.replays)]
                cursors = []
                for user in attackers:
                    auth = {"Authorization": f"Bearer {token(user)}"}
                    cursors.append((await http.get("/api/sync", headers=auth)).json()["nextCursor"])
                conn = await asyncpg.connect(url)
                try:
                    other = uuid4()
                    chat_id = await conn.fetchval(
                        "INSERT INTO messenger.chats (id, title, created_by)"
                        " VALUES (gen_random_uuid(), 'other', $1) RETURNING id",
                        other,
                    )
                    step = args.rows // 20
                    for start in range(0, args.rows, step):
                        await conn.execute(SEED, chat_id, start, min(args.rows, start + step) - 1)
                    await conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
                finally:
                    await conn.close()
                me = uuid4()
                created = await http.post(
                    "/api/chats",
                    json={"title": "victim", "memberUserIds": []},
                    headers={"Authorization": f"Bearer {token(me)}"},
                )
                chat = created.json()["chatId"]
                ws_url = f"ws://127.0.0.1:{port}/hubs/messenger"
                await victim(http, ws_url, chat, me, 5)  # warm-up
                idle = await victim(http, ws_url, chat, me, args.samples)
                stop = asyncio.Event()
                seen: Counter[int] = Counter()
                limits = httpx.Limits(max_connections=args.replays * 2)
                async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as flood:
                    tasks = [
                        asyncio.create_task(attacker(flood, user, cursor, stop, seen))
                        for user, cursor in zip(attackers, cursors, strict=True)
                    ]
                    await asyncio.sleep(1.0)  # the replays are under way
                    loaded = await victim(http, ws_url, chat, me, args.samples)
                    stop.set()
                    await asyncio.gather(*tasks)
        finally:
            serve.terminate()
            await serve.wait()
    return {"idle": idle, "loaded": loaded, "attackers": dict(seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--unbounded", action="store_true")
    args = parse_with_smoke(parser, {"rows": 20_000, "replays": 3, "samples": 5})
    result = asyncio.run(run(args))
    rows = []
    for what, index in (("REST post", 0), ("WebSocket connect", 1)):
        idle, loaded = result["idle"][index], result["loaded"][index]
        ratio = round(loaded["p95_ms"] / idle["p95_ms"], 2)
        rows.append(
            [what, idle["p50_ms"], idle["p95_ms"], loaded["p50_ms"], loaded["p95_ms"], ratio]
        )
    print_table(["victim", "idle p50", "idle p95", "replays p50", "replays p95", "p95 ratio"], rows)
    print(f"attackers' answers: {result['attackers']}")
    write_json("sync_replay", {"args": vars(args), "machine": machine(), **result})


if __name__ == "__main__":
    main()
