"""The WatchPresence flood (docs/RELIABILITY.md, H35; issue 47, point 4), one command:

    python -m bench.hub.presence_flood [--connections 40] [--ids 500] [--seconds 20] [--smoke]

Starts ``realtime-dispatch serve`` (deployment mode: a JWT secret, the machine's PostgreSQL)
and measures a victim's ``POST /api/chats/{id}/messages`` (a fresh connection each, one every
100 ms) in three phases of ``--seconds``: idle; while one user's ``--connections`` WebSocket
connections each loop ``WatchPresence`` of ``--ids`` strangers (one call in flight per
connection, as the hub allows); and, as the peer, the same loop calling an unknown method
with the same payload (what parsing and answering a frame of that size costs anyway). The
flood runs in a child process of its own, so that the victim's client keeps its own core
share. Prints the victim's post p50/p95/max per phase, the p95's ratio to idle, and the
flood's calls a second and how many were refused.

With ``PYTHONPATH`` pointing at another checkout's ``src``, the server (and this driver) run
that code: the way to measure before a change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect

from bench._common import module_command, parse_with_smoke
from bench.http.header_flood import timed_requests
from bench.hub.fanout import SECRET, drop_database, prepare_database, user_id, wait_http
from support.hub_wire import RS_BYTES as RS
from support.hub_wire import make_token
from support.procs import free_port
from support.stats import percentile


def token_for(user: uuid.UUID) -> str:
    return make_token(user, ttl=3600, secret=SECRET)


async def flood_connection(
    port: int, method: str, ids: int, until: float, counts: dict[str, int]
) -> None:
    """One connection of the attacker: ``method`` of ``ids`` strangers, one call in flight."""
    headers = {"Authorization": f"Bearer {token_for(user_id(999_999))}"}
    strangers = [str(uuid.uuid4()) for _ in range(ids)]
    async with connect(
        f"ws://127.0.0.1:{port}/hubs/messenger", additional_headers=headers, max_size=None
    ) as ws:
        await ws.send(b'{"protocol":"json","version":1}' + RS)
        await ws.recv()  # the handshake's answer
        n = 0
        while time.monotonic() < until:
            n += 1
            frame = {"type": 1, "target": method, "invocationId": str(n), "arguments": [strangers]}
            await ws.send(orjson.dumps(frame) + RS)
            while True:  # up to its completion (pings and pushes skipped)
                message = await ws.recv()
                data = message if isinstance(message, bytes) else message.encode()
                done = [orjson.loads(r) for r in data.split(RS) if r]
                completion = next((r for r in done if r.get("type") == 3), None)
                if completion is not None:
                    break
            counts["calls"] += 1
            if completion.get("error"):
                counts["errors"] += 1


async def flood(
    port: int, connections: int, method: str, ids: int, seconds: float
) -> dict[str, Any]:
    counts = {"calls": 0, "errors": 0}
    until = time.monotonic() + seconds
    await asyncio.gather(
        *(flood_connection(port, method, ids, until, counts) for _ in range(connections))
    )
    return {
        "calls_per_s": round(counts["calls"] / seconds, 1),
        "refused_share": round(counts["errors"] / max(1, counts["calls"]), 3),
    }


async def phase(
    port: int, args: argparse.Namespace, method: str | None, post: Any
) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    child = None
    if method is not None:
        child = await asyncio.create_subprocess_exec(
            *module_command(__spec__.name),
            "--flood-role",
            "--port",
            str(port),
            "--method",
            method,
            "--connections",
            str(args.connections),
            "--ids",
            str(args.ids),
            "--seconds",
            str(args.seconds + 1),
            stdout=asyncio.subprocess.PIPE,
        )
        await asyncio.sleep(1.0)  # its connections open and the loop runs
    errors: list[str] = []
    posts = await timed_requests(base, args.seconds, post, errors)
    flooded: dict[str, Any] = {}
    if child is not None:
        out, _ = await child.communicate()
        flooded = json.loads(out.decode() or "{}")
    return {
        "victim_post_ms": {
            "p50": round(statistics.median(posts), 1),
            "p95": round(percentile(posts, 0.95), 1),
            "max": round(max(posts), 1),
        },
        "victim_errors": len(errors),
        "flood": flooded,
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
        REALTIME_LOG_LEVEL="error",
    )
    command = [sys.executable, "-m", "realtime_dispatch.cli.main", "serve", "--port", str(port)]
    server = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    token = token_for(user_id(1))

    def post(http: httpx.AsyncClient) -> Any:
        return http.post(
            f"/api/chats/{chat}/messages",
            json={"body": f"victim {uuid.uuid4()}"},
            headers={"Authorization": f"Bearer {token}"},
        )

    try:
        await wait_http(port)
        idle = await phase(port, args, None, post)
        watch = await phase(port, args, "WatchPresence", post)
        unknown = await phase(port, args, "NoSuchMethod", post)
    finally:
        server.terminate()
        await server.wait()
        await drop_database(dsn, bench_dsn)
    floor = idle["victim_post_ms"]["p95"]
    return {
        "connections": args.connections,
        "ids": args.ids,
        "seconds": args.seconds,
        "idle": idle,
        "watch_presence_flood": watch,
        "unknown_method_flood": unknown,
        "p95_ratio_watch_to_idle": round(watch["victim_post_ms"]["p95"] / floor, 2),
        "p95_ratio_unknown_to_idle": round(unknown["victim_post_ms"]["p95"] / floor, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn")
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--ids", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--flood-role", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parse_with_smoke(parser, {"connections": 4, "seconds": 2.0, "ids": 50})
    if args.flood_role:
        result = asyncio.run(
            flood(args.port, args.connections, args.method, args.ids, args.seconds)
        )
        print(json.dumps(result))
        return
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
