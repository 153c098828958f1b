"""Sync replays against a victim: does ``GET /api/sync`` from an old cursor, 20 at a time at 1M
outbox rows that are not the callers', slow down another user's REST post and WebSocket
connect?

    python -m bench.sync.replay [--dsn DSN] [--rows 1000000] [--replays 20] [--samples 40]
                                [--rounds 4] [--in-process] [--unbounded] [--smoke]

A ``realtime-dispatch serve`` on a scratch database ``bench_replay_*`` (dropped at the end).
``--replays`` attackers (one user each, in no chat) take a cursor, then ``--rows`` Done rows of
another user's chat are written (``INSERT … SELECT generate_series``, 20 transactions). The
victim posts ``--samples`` messages one after another and opens ``--samples`` WebSocket
connections (negotiate skipped; upgrade, handshake, answer), idle and while every attacker
replays its old cursor in a loop (the same cursor again and again, as a hostile client
would), in ``--rounds`` alternating rounds (idle, replays, idle, …; ``samples / rounds`` each),
so that load from elsewhere on a shared machine falls on both phases alike. The attackers run
in a process of their own (``--in-process``: in the victim's event loop, as the first version
of this bench did, where the victim's timings also wait for the attackers' own client work).
It reports the victim's p50 / p95 in both phases, their ratio, what the attackers got
(200 / 429 / 503), and the CPU of ``serve``, its PostgreSQL backends and the attackers during
the replays. ``--unbounded`` lifts the sync bounds (a scan bound of 10M rows, a 60 s timeout,
1,000 pages per user, a sync pool of 10, 10 pages at once) to show what they hold off, in the
same sitting. Writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections import Counter
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import orjson
from websockets.asyncio.client import connect

from bench._common import (
    DEFAULT_DSN,
    machine,
    module_command,
    parse_with_smoke,
    print_table,
    scratch_database,
    write_json,
)
from support.hub_wire import RS, make_token
from support.procs import cpu_seconds_of, free_port
from support.stats import percentile

SECRET = "bench-sync-replay-secret-0123456789abcdef"
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
    "REALTIME_SYNC_MAX_CONCURRENT": "10",
}


def token(user: UUID) -> str:
    return make_token(user, ttl=7200, secret=SECRET)


def quantiles(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples, 0.5), 1),
        "p95_ms": round(percentile(samples, 0.95), 1),
    }


async def victim(
    http: httpx.AsyncClient, ws_url: str, chat: str, user: UUID, n: int
) -> tuple[list[float], list[float]]:
    """``n`` posts and ``n`` connects, one after another: their times in ms."""
    auth = {"Authorization": f"Bearer {token(user)}"}
    posts: list[float] = []
    connects: list[float] = []
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
    return posts, connects


async def attacker(
    http: httpx.AsyncClient, user: UUID, cursor: str, stop: asyncio.Event, seen: Counter[int]
) -> None:
    auth = {"Authorization": f"Bearer {token(user)}"}
    while not stop.is_set():
        r = await http.get("/api/sync", params={"since": cursor}, headers=auth)
        seen[r.status_code] += 1


async def attack(base: str, users: list[str], cursors: list[str]) -> None:
    """The attackers' process (``--attack``): each line ``start`` on stdin starts every
    attacker's loop; ``stop`` stops them and prints their answers as JSON on stdout."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    limits = httpx.Limits(max_connections=len(users) * 2)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as flood:
        while line := (await reader.readline()).strip():
            assert line == b"start", line
            stop = asyncio.Event()
            seen: Counter[int] = Counter()
            tasks = [
                asyncio.create_task(attacker(flood, UUID(user), cursor, stop, seen))
                for user, cursor in zip(users, cursors, strict=True)
            ]
            assert (await reader.readline()).strip() == b"stop"
            stop.set()
            await asyncio.gather(*tasks)
            print(orjson.dumps({str(k): v for k, v in seen.items()}).decode(), flush=True)


class Attackers:
    """The replaying attackers, in their own process or (``in_process``) in this event loop."""

    def __init__(self, base: str, users: list[UUID], cursors: list[str], *, in_process: bool):
        self._args = (base, users, cursors)
        self._in_process = in_process
        self._proc: asyncio.subprocess.Process | None = None
        self._flood: httpx.AsyncClient | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._seen: Counter[int] = Counter()
        self.pid = os.getpid()

    async def __aenter__(self) -> Attackers:
        base, users, cursors = self._args
        if self._in_process:
            limits = httpx.Limits(max_connections=len(users) * 2)
            self._flood = httpx.AsyncClient(base_url=base, timeout=120, limits=limits)
            return self
        self._proc = await asyncio.create_subprocess_exec(
            *module_command(__spec__.name), "--attack", base, ",".join(map(str, users)),
            ",".join(cursors), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.pid = self._proc.pid
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._flood is not None:
            await self._flood.aclose()
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            await self._proc.wait()

    async def start(self) -> None:
        _base, users, cursors = self._args
        if self._flood is not None:
            self._stop = asyncio.Event()
            self._tasks = [
                asyncio.create_task(attacker(self._flood, user, cursor, self._stop, self._seen))
                for user, cursor in zip(users, cursors, strict=True)
            ]
            return
        assert self._proc is not None
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"start\n")
        await self._proc.stdin.drain()

    async def stop(self) -> None:
        if self._flood is not None:
            self._stop.set()
            await asyncio.gather(*self._tasks)
            return
        assert self._proc is not None
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(b"stop\n")
        await self._proc.stdin.drain()
        answers = orjson.loads(await self._proc.stdout.readline())
        self._seen.update({int(k): v for k, v in answers.items()})

    def answers(self) -> dict[int, int]:
        return dict(self._seen)


async def backends(url: str) -> list[int]:
    """The PostgreSQL backends of the scratch database (serve's pools, this bench's own)."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return [r["pid"] for r in rows]


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
                per_round = max(1, args.samples // args.rounds)
                idle: tuple[list[float], list[float]] = ([], [])
                loaded: tuple[list[float], list[float]] = ([], [])
                cpu = {"serve": 0.0, "postgres": 0.0, "attackers": 0.0}
                replaying = 0.0
                async with Attackers(base, attackers, cursors, in_process=args.in_process) as flood:
                    for _ in range(args.rounds):
                        posts, connects = await victim(http, ws_url, chat, me, per_round)
                        idle[0].extend(posts)
                        idle[1].extend(connects)
                        await flood.start()
                        await asyncio.sleep(1.0)  # the replays are under way
                        pg = await backends(url)
                        parts = {"serve": [serve.pid], "postgres": pg, "attackers": [flood.pid]}
                        before = {k: cpu_seconds_of(v) for k, v in parts.items()}
                        started = time.perf_counter()
                        posts, connects = await victim(http, ws_url, chat, me, per_round)
                        replaying += time.perf_counter() - started
                        after = {k: cpu_seconds_of(v) for k, v in parts.items()}
                        for k in cpu:
                            cpu[k] += after[k] - before[k]
                        loaded[0].extend(posts)
                        loaded[1].extend(connects)
                        await flood.stop()
                    seen = flood.answers()
        finally:
            serve.terminate()
            await serve.wait()
    cores = {k: round(v / replaying, 2) for k, v in cpu.items()}
    return {
        "idle": [quantiles(idle[0]), quantiles(idle[1])],
        "loaded": [quantiles(loaded[0]), quantiles(loaded[1])],
        "attackers": seen,
        "cores_while_replaying": cores,
    }


def main() -> None:
    if sys.argv[1:2] == ["--attack"]:
        base, users, cursors = sys.argv[2:5]
        asyncio.run(attack(base, users.split(","), cursors.split(",")))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--unbounded", action="store_true")
    args = parse_with_smoke(parser, {"rows": 20_000, "replays": 3, "samples": 4, "rounds": 2})
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
    print(f"CPU while replaying (cores of {os.cpu_count()}): {result['cores_while_replaying']}")
    print(f"load average at the end: {os.getloadavg()}")
    write_json("sync_replay", {"args": vars(args), "machine": machine(), **result})


if __name__ == "__main__":
    main()
