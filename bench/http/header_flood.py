"""The header flood (docs/RELIABILITY.md, H9), one command:

    python -m bench.http.header_flood [--connections 10] [--seconds 30] [--python PYTHON] [--smoke]

Starts ``realtime-dispatch serve`` (deployment mode: a JWT secret, the machine's PostgreSQL)
with ``--python`` (default: this one; give another version's interpreter to measure it), and
measures ``/healthz`` and a victim's ``POST /api/chats/{id}/messages`` (a fresh connection
each, one every 100 ms each) for ``--seconds`` with no flood, then for ``--seconds`` while
``--connections`` connections each stream a header without end (``X-Flood: aaaa…``, 16 KiB a
write, reconnecting when the server ends one). Prints the server's peak RSS (``VmHWM``) and
RSS before and at the end, ``/healthz`` p50/p99/max and the victim's post p50/p95/max for
both phases, and how many bytes the flood got the server to take.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import httpx
import jwt

from bench._common import parse_with_smoke
from bench.hub.fanout import SECRET, drop_database, prepare_database, user_id, wait_http
from support.procs import free_port, memory_kib
from support.stats import percentile

CHUNK = b"a" * 16 * 1024


async def timed_requests(base: str, seconds: float, make: Any, errors: list[str]) -> list[float]:
    """``make(http)`` every 100 ms on a fresh connection each for ``seconds``; its latencies
    in ms (a failed or timed-out request counts with its time and in ``errors``)."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def one() -> None:
        started = time.monotonic()
        try:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                response = await make(http)
                if response.status_code >= 300:
                    errors.append(str(response.status_code))
        except httpx.HTTPError as exc:
            errors.append(type(exc).__name__)
        latencies.append((time.monotonic() - started) * 1000)

    tasks = []
    while time.monotonic() < deadline:
        tasks.append(asyncio.ensure_future(one()))
        await asyncio.sleep(0.1)
    await asyncio.gather(*tasks)
    return latencies


async def flood(port: int, stop: asyncio.Event, sent: list[int]) -> None:
    """One connection streaming a header without end; a new one when the server ends it."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ")
            while not stop.is_set() and not reader.at_eof():
                writer.write(CHUNK)
                sent[0] += len(CHUNK)
                await writer.drain()
                await asyncio.sleep(0)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def phase(port: int, seconds: float, connections: int, post: Any) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    stop = asyncio.Event()
    sent = [0]
    floods = [asyncio.ensure_future(flood(port, stop, sent)) for _ in range(connections)]
    errors: list[str] = []
    health, posts = await asyncio.gather(
        timed_requests(base, seconds, lambda http: http.get("/healthz"), errors),
        timed_requests(base, seconds, post, errors),
    )
    stop.set()
    await asyncio.gather(*floods)
    return {
        "healthz_ms": {
            "p50": round(statistics.median(health), 1),
            "p99": round(percentile(health, 0.99), 1),
            "max": round(max(health), 1),
        },
        "victim_post_ms": {
            "p50": round(statistics.median(posts), 1),
            "p95": round(percentile(posts, 0.95), 1),
            "max": round(max(posts), 1),
        },
        "requests": len(health) + len(posts),
        "errors": len(errors),
        "flood_mb_sent": round(sent[0] / 2**20, 1),
    }


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    bench_dsn, chat = await prepare_database(dsn, 2)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(
        REALTIME_DATABASE_URL=bench_dsn,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY="bench-service-key",
        REALTIME_LOG_LEVEL="warning",
    )
    command = [args.python, "-m", "realtime_dispatch.cli.main", "serve", "--port", str(port)]
    server = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    token = jwt.encode(
        {"sub": str(user_id(1)), "exp": int(time.time()) + 3600}, SECRET, algorithm="HS256"
    )

    def post(http: httpx.AsyncClient) -> Any:
        return http.post(
            f"/api/chats/{chat}/messages",
            json={"body": f"victim {uuid.uuid4()}"},
            headers={"Authorization": f"Bearer {token}"},
        )

    try:
        await wait_http(port)
        idle = await phase(port, args.seconds, 0, post)
        before = memory_kib(server.pid)
        flooded = await phase(port, args.seconds, args.connections, post)
        after = memory_kib(server.pid)
    finally:
        server.terminate()
        await server.wait()
        await drop_database(dsn, bench_dsn)
    return {
        "python": args.python,
        "connections": args.connections,
        "seconds": args.seconds,
        "rss_mb_before_flood": round(before["VmRSS"] / 1024, 1),
        "peak_rss_mb_before_flood": round(before["VmHWM"] / 1024, 1),
        "peak_rss_mb_after_flood": round(after["VmHWM"] / 1024, 1),
        "rss_mb_after_flood": round(after["VmRSS"] / 1024, 1),
        "idle": idle,
        "flood": flooded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn")
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--python", default=sys.executable)
    args = parse_with_smoke(parser, {"connections": 2, "seconds": 2.0})
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
