"""Connection churn with pushes (docs/RELIABILITY.md, H29), one command:

    python -m bench.http.connection_churn [--connects 10000] [--concurrency 40] [--users 200]
                                     [--pushes 50] [--settle 10] [--src SRC] [--smoke]

Starts ``realtime-dispatch hub`` (deployment mode, as the CLI runs it: uvloop, the GC tuning)
and opens and cuts ``--connects`` connections, ``--concurrency`` at a time, each cut mid-work
by an abort (a reset, no goodbye), a quarter each of:

* a WebSocket (skipping negotiation): handshake answered, then cut;
* Server-Sent Events: negotiated, stream open, handshake posted and answered on the stream,
  then cut;
* long polling: negotiated, opened, handshake posted, a poll waiting, then cut;
* plain HTTP: fifty ``GET /healthz`` pipelined in one write, then cut with answers in flight.

Meanwhile ``--pushes`` pushes a second go to the churning users' groups, and ``--held``
WebSockets stay open throughout (a live heap for the GC's full collections to walk). The hub's
RSS is sampled every ``--every`` connects and once more after ``--settle`` seconds idle. Prints the
samples, RSS at the start (after the first ``--every`` connects: allocator arenas and caches
warmed), at the end and after the settle, the connects per second, the failures by kind and
the tracebacks in the hub's log, the hub's CPU seconds per 1,000 connects, and, with
``--hub-log-level debug``, the full collections the hub ran after connection ends (``gc_sweep``:
how many, their pause median and max, their share of the run's time). ``--src``: a source tree
first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import httpx
import jwt
from websockets.asyncio.client import connect

from bench._common import parse_with_smoke
from bench.hub.fanout import SECRET, SERVICE_KEY, drop_database, prepare_database, wait_http
from support.hub_wire import HANDSHAKE
from support.procs import cpu_seconds, free_port, memory_kib

HUB = "/hubs/messenger"
KINDS = ("websocket", "sse", "long_polling", "http")


class Churn:
    def __init__(self, port: int, users: int) -> None:
        self.port = port
        self.users = [str(uuid.uuid4()) for _ in range(users)]
        expiry = int(time.time()) + 24 * 3600
        self.tokens = [
            jwt.encode({"sub": user, "exp": expiry}, SECRET, algorithm="HS256")
            for user in self.users
        ]
        self.http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            timeout=30,
            limits=httpx.Limits(keepalive_expiry=1),  # well within the hub's 5 s keep-alive
        )
        self.failures: dict[str, int] = {}
        self.done = 0

    def failed(self, kind: str, exc: BaseException) -> None:
        key = f"{kind}:{type(exc).__name__}"
        self.failures[key] = self.failures.get(key, 0) + 1

    async def negotiate(self, token: str) -> str:
        response = await self.http.post(
            f"{HUB}/negotiate?negotiateVersion=1", headers={"Authorization": f"Bearer {token}"}
        )
        response.raise_for_status()
        return str(response.json()["connectionToken"])

    async def raw(self, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(request)
        return reader, writer

    async def websocket(self, token: str) -> None:
        url = f"ws://127.0.0.1:{self.port}{HUB}?access_token={token}"
        async with connect(url, open_timeout=30, ping_interval=None) as ws:
            await ws.send(HANDSHAKE.decode())
            await asyncio.wait_for(ws.recv(), 30)
            ws.transport.abort()

    async def sse(self, token: str) -> None:
        connection = await self.negotiate(token)
        reader, writer = await self.raw(
            b"GET %s?id=%s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
            b"Authorization: Bearer %s\r\n\r\n"
            % (HUB.encode(), connection.encode(), token.encode())
        )
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            posted = await self.http.post(
                f"{HUB}?id={connection}",
                content=HANDSHAKE,
                headers={"Authorization": f"Bearer {token}"},
            )
            posted.raise_for_status()
            await asyncio.wait_for(reader.readuntil(b"\x1e"), 30)  # the handshake's answer
        finally:
            writer.transport.abort()

    async def long_polling(self, token: str) -> None:
        connection = await self.negotiate(token)
        auth = {"Authorization": f"Bearer {token}"}
        (await self.http.get(f"{HUB}?id={connection}", headers=auth)).raise_for_status()
        posted = await self.http.post(f"{HUB}?id={connection}", content=HANDSHAKE, headers=auth)
        posted.raise_for_status()
        poll = b"GET %s?id=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % (
            HUB.encode(),
            connection.encode(),
            token.encode(),
        )
        reader, writer = await self.raw(poll)  # answered with the handshake's answer
        try:
            await asyncio.wait_for(reader.readuntil(b"\x1e"), 30)
            writer.write(poll)  # the next one waits for a message
            await writer.drain()
            await asyncio.sleep(0.02)
        finally:
            writer.transport.abort()

    async def plain_http(self, _token: str) -> None:
        reader, writer = await self.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)  # answers in flight
        finally:
            writer.transport.abort()

    async def one(self, n: int) -> None:
        kind = KINDS[n % len(KINDS)]
        token = self.tokens[n % len(self.tokens)]
        work = {
            "websocket": self.websocket,
            "sse": self.sse,
            "long_polling": self.long_polling,
            "http": self.plain_http,
        }[kind]
        try:
            await work(token)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, httpx.HTTPError) as exc:
            self.failed(kind, exc)
        except Exception as exc:  # a refusal the websockets client raises, say
            self.failed(kind, exc)
        self.done += 1

    async def pushes(self, rate: float, stop: asyncio.Event) -> None:
        if rate <= 0:
            return
        headers = {"Authorization": f"Bearer {SERVICE_KEY}"}
        body = {"target": "message_received", "arguments": [{"chatId": "churn", "seq": 0}]}
        while not stop.is_set():
            user = random.choice(self.users)
            with contextlib.suppress(httpx.HTTPError):
                await self.http.post(
                    f"/api/v1/hubs/messenger/groups/user:{user}", json=body, headers=headers
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1 / rate)


async def hold(port: int, tokens: list[str], count: int, ready: asyncio.Event) -> None:
    """``count`` WebSockets open (handshake answered) until cancelled."""
    async with contextlib.AsyncExitStack() as stack:
        for n in range(count):
            url = f"ws://127.0.0.1:{port}{HUB}?access_token={tokens[n % len(tokens)]}"
            ws = await stack.enter_async_context(connect(url, open_timeout=60, ping_interval=None))
            await ws.send(HANDSHAKE.decode())
            await ws.recv()
        ready.set()
        await asyncio.Event().wait()


def sweeps(log: str, seconds: float) -> dict[str, Any]:
    """The hub's ``gc_sweep`` lines (JSON, at debug): how many, their pauses, their CPU."""
    records = []
    for line in log.splitlines():
        if '"gc_sweep"' in line:
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
    if not records:
        return {"count": 0}
    pauses = [float(r["ms"]) for r in records]
    cpu = [float(r["cpu_ms"]) for r in records]
    return {
        "count": len(records),
        "ms_median": round(statistics.median(pauses), 1),
        "ms_max": round(max(pauses), 1),
        "cpu_ms_median": round(statistics.median(cpu), 1),
        "cpu_ms_max": round(max(cpu), 1),
        "cpu_share_of_run": round(sum(cpu) / 1000 / seconds, 4),
    }


async def run(args: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    churn = Churn(port, args.users)
    held_tokens = [
        jwt.encode({"sub": str(uuid.uuid4()), "exp": int(time.time()) + 86400}, SECRET)
        for _ in range(max(1, args.held // 40))
    ]
    ready = asyncio.Event()
    holder = asyncio.ensure_future(hold(port, held_tokens, args.held, ready))
    await asyncio.wait([holder, asyncio.ensure_future(ready.wait())], return_when="FIRST_COMPLETED")
    if holder.done():
        holder.result()
    samples: list[dict[str, float]] = []
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    stop = asyncio.Event()
    pusher = asyncio.ensure_future(churn.pushes(args.pushes, stop))
    numbers = itertools.count()

    async def lane() -> None:
        while (n := next(numbers)) < args.connects:
            await churn.one(n)
            if (n + 1) % args.every == 0:
                samples.append(
                    {
                        "connects": n + 1,
                        "seconds": round(time.monotonic() - started, 1),
                        "rss_mb": round(memory_kib(pid)["VmRSS"] / 1024, 1),
                    }
                )

    try:
        await asyncio.gather(*(lane() for _ in range(args.concurrency)))
    finally:
        stop.set()
        await pusher
        await churn.http.aclose()
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(pid) - cpu_before
    end = memory_kib(pid)["VmRSS"]
    await asyncio.sleep(args.settle)
    settled = memory_kib(pid)["VmRSS"]
    holder.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await holder
    samples.sort(key=lambda s: s["connects"])
    start = samples[0]["rss_mb"] if samples else round(end / 1024, 1)
    return {
        "connects": args.connects,
        "connects_per_s": round(args.connects / elapsed, 1),
        "held_websockets": args.held,
        "seconds": round(elapsed, 1),
        "hub_cpu_s_per_1000_connects": round(cpu / args.connects * 1000, 2),
        "rss_mb_start": start,
        "rss_mb_end": round(end / 1024, 1),
        f"rss_mb_after_{args.settle:g}s_idle": round(settled / 1024, 1),
        "rss_mb_growth_after_idle": round(settled / 1024 - start, 1),
        "failures": churn.failures,
        "samples": samples,
    }


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    bench_dsn, _ = await prepare_database(dsn, 1)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(
        REALTIME_DATABASE_URL=bench_dsn,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_LOG_LEVEL=args.hub_log_level,
        REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT="0",  # every client is 127.0.0.1
    )
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.src, env.get("PYTHONPATH")]))
    try:
        with tempfile.TemporaryFile() as log:
            hub = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "realtime_dispatch.cli.main", "hub", "--port", str(port),
                env=env, stdout=asyncio.subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
            try:
                await wait_http(port)
                result = await run(args, port, hub.pid)
            finally:
                hub.terminate()
                await hub.wait()
            log.seek(0)
            text = log.read().decode("utf-8", "replace")
            result["hub_tracebacks"] = text.count("Traceback")
            result["gc_sweeps"] = sweeps(text, result["seconds"] + args.settle)
    finally:
        await drop_database(dsn, bench_dsn)
    return {"src": args.src or "this checkout", **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn")
    parser.add_argument("--connects", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--pushes", type=float, default=50, help="pushes a second")
    parser.add_argument("--every", type=int, default=1000, help="connects between RSS samples")
    parser.add_argument("--settle", type=float, default=10)
    parser.add_argument("--held", type=int, default=0, help="WebSockets open throughout")
    parser.add_argument("--hub-log-level", default="warning")
    parser.add_argument("--src", help="a source tree first on PYTHONPATH (another version)")
    args = parse_with_smoke(
        parser, {"connects": 200, "concurrency": 8, "users": 20, "every": 50, "settle": 1.0}
    )
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
