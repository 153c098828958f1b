"""What one batch request costs the server, nothing delivered: the hub's batch endpoint (with and
without membership marks) against an HTTP floor, the same worker publisher posting to each:

    python -m bench.hub.http_push [--requests 20000] [--runs 3] [--servers floor,hub,hub-marked]

* ``floor``: ``bench/hub/peers.py floor``'s HTTP side (uvloop and httptools: the body decoded,
  its records framed, every push answered accepted; no auth, no checks, no barrier);
* ``hub``: the real hub under ``run_hub`` (``bench/hub/fanout.py hub``), its batch endpoint
  served by its HTTP protocol; every batch pays its membership barrier's round trip;
* ``hub-marked``: the same, the publisher handing on membership marks as ``realtime-dispatch
  worker`` does with ``REALTIME_HUB_URL`` (a mark keeper in this process): no round trip.

The pushes go to a chat nobody is in, so what is measured is the request (read, parse, checks,
publish path, answer) and none of the fan-out. For each server: the server's CPU µs per request
(``--batch`` pushes, ``--concurrency`` requests in flight), median of ``--runs``, and the hub's
``membership_barriers_total`` by kind (so a run whose marks did not count shows).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import DEFAULT_DSN, module_command, parse_with_smoke
from bench.hub.fanout import drop_database, fanout_run, prepare_database, wait_http
from bench.hub.peers import http_marks, hub_barriers
from support.procs import cpu_seconds_ns, free_port

HERE = Path(__file__).resolve().parent
SERVERS = ("floor", "hub", "hub-marked")


async def start(kind: str, port: int, dsn: str) -> tuple[Any, str | None]:
    """The server process and (for the hub) its benchmark database."""
    if kind == "floor":
        proc = await asyncio.create_subprocess_exec(
            *module_command("bench.hub.peers"),
            "floor",
            "--port",
            str(port),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert json.loads(line)["event"] == "listening", line
        return proc, None
    bench_dsn, _ = await prepare_database(dsn, 0)
    proc = await asyncio.create_subprocess_exec(
        *module_command("bench.hub.fanout"), "hub", "--port", str(port), "--dsn", bench_dsn
    )
    await wait_http(port)
    return proc, bench_dsn


async def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    server, bench_dsn = await start(kind, port, args.dsn)
    keeper = None
    try:
        if kind == "hub-marked":
            assert bench_dsn is not None
            keeper = await http_marks(bench_dsn)
        chat = uuid.uuid4()
        pushes = args.requests * args.batch
        mark = None if keeper is None else keeper[2]
        warm_up = 100 * args.batch
        await fanout_run(port, chat, warm_up, args.concurrency, args.batch, mark=mark)
        per_request = []
        for _ in range(args.runs):
            await asyncio.sleep(0.5)
            cpu0, t0 = cpu_seconds_ns(server.pid), time.perf_counter()
            await fanout_run(port, chat, pushes, args.concurrency, args.batch, mark=mark)
            elapsed = time.perf_counter() - t0
            per_request.append((cpu_seconds_ns(server.pid) - cpu0) / args.requests * 1e6)
        barriers = await hub_barriers(port) if kind != "floor" else None
        return {
            "server": kind,
            "requests_per_run": args.requests,
            "pushes_per_request": args.batch,
            "cpu_us_per_request_median": round(statistics.median(per_request), 1),
            "cpu_us_per_request_range": [round(min(per_request), 1), round(max(per_request), 1)],
            "requests_per_second_last_run": round(args.requests / elapsed),
            **({"membership_barriers": barriers} if barriers is not None else {}),
        }
    finally:
        if keeper is not None:
            keeper[0].cancel()
            await keeper[1].close()
        server.terminate()
        await server.wait()
        if bench_dsn is not None:
            await drop_database(args.dsn, bench_dsn)


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for kind in args.servers.split(","):
        results.append(await measure(kind, args))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    cost = {r["server"]: r["cpu_us_per_request_median"] for r in results}
    ratios = {
        f"{kind}_vs_floor": round(cost[kind] / cost["floor"], 2)
        for kind in cost
        if kind != "floor" and cost.get("floor")
    }
    return {"results": results, "cpu_ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--requests", type=int, default=20000, help="per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="pushes per request")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    args = parse_with_smoke(parser, {"requests": 200, "runs": 1})
    for kind in args.servers.split(","):
        if kind not in SERVERS:
            parser.error(f"unknown server {kind!r} (one of {', '.join(SERVERS)})")
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
