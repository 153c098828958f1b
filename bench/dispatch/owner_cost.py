"""What an owner command costs: CPU of the owner processes and of PostgreSQL per commit, with no
dispatcher running.

    python -m bench.dispatch.owner_cost [--command send_message|send_idempotent|enqueue]
        [--rate 1000] [--seconds 10] [--runs 3] [--dsn DSN]

Each run seeds 100 chats of 10 members in a scratch database ``bench_owner_*`` and sets the idle
flag to false (as under load: commits do not notify), then runs ``bench/dispatch/lag.py``'s owners
(8 connections in 2 processes, on uvloop) at ``--rate`` commits/s. Owner and PostgreSQL CPU are read
from ``/proc`` over the steady part of the run (from 4 s after the start to ~1.5 s before the end):
every owner process and every PostgreSQL process (so the background writer and WAL writer too).
Reports µs of CPU per commit, medians of ``--runs``, and writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import asyncpg

from bench._common import (
    DEFAULT_DSN,
    parse_with_smoke,
    postgres_pids,
    print_table,
    scratch_database,
    seed_chats,
    settle,
    write_json,
)
from bench.dispatch.lag import run_owners
from support.procs import cpu_seconds

WARM_UP = 4.0


def owner_pids() -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if b"--owner-process" in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def cpu_of(pids: list[int]) -> dict[int, float]:
    found = {}
    for pid in pids:
        try:
            found[pid] = cpu_seconds(pid)
        except (OSError, ValueError):
            continue
    return found


def used(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[pid] - before[pid] for pid in after if pid in before)


async def one_run(args: argparse.Namespace) -> dict[str, float]:
    async with scratch_database(args.dsn, "owner") as url:
        conn = await asyncpg.connect(url)
        try:
            rosters = await seed_chats(conn, 100, 10)
            await settle(conn)
            await conn.execute("UPDATE messenger.realtime_dispatch_state SET idle = false")
        finally:
            await conn.close()
        owners = asyncio.ensure_future(
            run_owners(
                url,
                rosters,
                owners=8,
                processes=2,
                rate=args.rate,
                seconds=args.seconds,
                command=args.command,
            )
        )
        await asyncio.sleep(WARM_UP)
        pg0, own0, t0 = cpu_of(postgres_pids()), cpu_of(owner_pids()), time.monotonic()
        await asyncio.sleep(args.seconds - WARM_UP)
        pg1, own1, t1 = cpu_of(postgres_pids()), cpu_of(owner_pids()), time.monotonic()
        rows = await owners
    wall = t1 - t0
    return {
        "commits_per_s": len(rows) / args.seconds,
        "owner_us_per_commit": used(own0, own1) / wall / args.rate * 1e6,
        "postgres_us_per_commit": used(pg0, pg1) / wall / args.rate * 1e6,
    }


async def main(args: argparse.Namespace) -> None:
    runs = []
    for n in range(args.runs):
        run = await one_run(args)
        runs.append(run)
        print(f"  run {n + 1}: {run}", flush=True)
    keys = ["commits_per_s", "owner_us_per_commit", "postgres_us_per_commit"]
    summary = {k: statistics.median(r[k] for r in runs) for k in keys}
    print(f"\n{args.command} at {args.rate:,.0f}/s, medians of {len(runs)} run(s)")
    print_table(keys, [[summary[k] for k in keys]])
    path = write_json(
        f"owner-{args.command}", {"args": vars(args), "runs": runs, "summary": summary}
    )
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--command", choices=["send_message", "send_idempotent", "enqueue"], default="send_message"
    )
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parse_with_smoke(parser, {"rate": 200.0, "seconds": WARM_UP + 2, "runs": 1})
    if args.seconds <= WARM_UP + 1:
        parser.error(f"--seconds must be more than {WARM_UP + 1:g}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
