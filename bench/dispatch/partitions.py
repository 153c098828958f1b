"""Partitioned dispatch: how fast a backlog drains with 1, 2 and 4 partitions and 1 or 2 worker
processes, in the same run.

    python -m bench.dispatch.partitions [--dsn DSN] [--rows 50000] [--chats 200] [--runs 3]
                               [--layouts 1x1,2x1,4x1,1x2,2x2,4x2]

A layout ``PxW`` is P partitions shared by W worker processes. Each run reseeds ``--rows`` real
messages with their Pending outbox rows (COPY) over ``--chats`` chats in a scratch database,
then starts W child processes that each run ``dispatch_service`` (the real dispatcher, one
runner per partition, a publisher that does nothing) and measures the time until no row is
Pending, with the CPU seconds of the workers and of the PostgreSQL server. Layouts alternate
within each run. Writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import replace
from typing import Any

import asyncpg

from bench._common import (
    DEFAULT_DSN,
    CpuMeter,
    NoopPublisher,
    machine,
    median_spread,
    module_command,
    parse_with_smoke,
    print_table,
    quiet_production_logging,
    reset_domain,
    scratch_database,
    seed_backlog,
    seed_chats,
    server_facts,
    settle,
    write_json,
)
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.service import dispatch_service
from support.procs import cpu_seconds


async def child(dsn: str, partitions: int) -> None:
    """One worker process: dispatch until stdin closes."""
    quiet_production_logging()
    options = replace(RealtimeDispatchOptions(), partitions=partitions, polling_interval=0.05)
    async with dispatch_service(dsn, options, NoopPublisher()) as service:
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        service.request_stop()


async def pending(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
        )
    )


async def one_layout(dsn: str, conn: asyncpg.Connection, args: Any, layout: str) -> dict[str, Any]:
    partitions, workers = (int(x) for x in layout.split("x"))
    await reset_domain(conn)
    rosters = await seed_chats(conn, args.chats, 2)
    # Hold the rows back until every worker is up, so that all start together.
    await seed_backlog(conn, list(rosters), args.rows)
    await conn.execute(
        "UPDATE messenger.realtime_outbox SET next_attempt_at = now() + interval '1 hour'"
    )
    await settle(conn)
    procs = [
        await asyncio.create_subprocess_exec(
            *module_command(__spec__.name),
            "--child",
            "--dsn",
            dsn,
            "--partitions",
            str(partitions),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            await proc.stdout.readline()
        before = [cpu_seconds(p.pid) for p in procs]
        meter = CpuMeter()
        meter.start()
        started = time.perf_counter()
        await conn.execute("UPDATE messenger.realtime_outbox SET next_attempt_at = now()")
        while await pending(conn):  # noqa: ASYNC110 (polls the database, nothing to await)
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        meter.stop()
        workers_cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(before)
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        await asyncio.gather(*(proc.wait() for proc in procs))
    return {
        "rows_per_s": args.rows / elapsed,
        "workers_cpu_s": workers_cpu,
        "postgres_cpu_s": meter.server,
        "machine_busy": meter.machine_busy,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layouts", default="1x1,2x1,4x1,1x2,2x2,4x2")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, default=1, help=argparse.SUPPRESS)
    smoke = {"rows": 2000, "chats": 20, "runs": 1, "layouts": "1x1,2x2"}
    args = parse_with_smoke(parser, smoke)
    if args.child:
        await child(args.dsn, args.partitions)
        return
    layouts = args.layouts.split(",")
    results: dict[str, list[dict[str, Any]]] = {layout: [] for layout in layouts}
    async with scratch_database(args.dsn, "partitions") as url:
        conn = await asyncpg.connect(url)
        try:
            facts = await server_facts(url)
            for _ in range(args.runs):
                for layout in layouts:
                    results[layout].append(await one_layout(url, conn, args, layout))
        finally:
            await conn.close()
    rows = []
    summary: dict[str, Any] = {}
    for layout in layouts:
        runs = results[layout]
        entry = {k: median_spread([r[k] for r in runs]) for k in runs[0]}
        summary[layout] = entry
        partitions, workers = layout.split("x")
        rows.append(
            [
                partitions,
                workers,
                f"{entry['rows_per_s']['median']:,.0f}",
                f"{entry['rows_per_s']['min']:,.0f}–{entry['rows_per_s']['max']:,.0f}",
                f"{entry['workers_cpu_s']['median']:.2f}",
                f"{entry['postgres_cpu_s']['median']:.2f}",
                f"{entry['machine_busy']['median']:.0%}",
            ]
        )
    print_table(
        ["partitions", "workers", "rows/s", "range", "workers CPU s", "PostgreSQL CPU s", "busy"],
        rows,
    )
    path = write_json(
        "partitions",
        {"machine": machine(), "server": facts, "args": vars(args), "results": summary},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main())
