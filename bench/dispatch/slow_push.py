"""Outcome wait under a slow hub: how long a pushed slice waits for its status to be written.

    python -m bench.dispatch.slow_push [--dsn DSN] [--rows 200] [--push-seconds 0.6] [--runs 3]
        [--smoke]

In a scratch database ``bench_slow_push_*`` (dropped at the end), each run seeds ``--rows``
real ``MessageReceived`` rows (one batch: 200 rows are four slices of 50) and runs one pass of
the real ``Dispatcher`` + ``OutboxStore`` + payload builder with a publisher that takes
``--push-seconds`` per slice (a slow hub or backplane at the dispatcher's boundary). The
publisher notes when each slice's push returned; the wait of a slice is the time from then to
its rows' ``updated_at`` (the outcome statement's ``now()``: both clocks are this host's).
Reports each slice's wait (median over runs, in ms) and the pass's duration; writes JSON to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from statistics import median
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry

from bench._common import (
    DEFAULT_DSN,
    machine,
    parse_with_smoke,
    print_table,
    quiet_production_logging,
    reset_domain,
    scratch_database,
    seed_backlog,
    seed_chats,
    write_json,
)
from realtime_dispatch.database.connections import DISPATCHER_SERVER_SETTINGS, create_pool
from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.dispatch.alerts import LogAlertSink
from realtime_dispatch.dispatch.dispatcher import Dispatcher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.outbox.store import OutboxStore


class SlowPublisher:
    """Takes ``seconds`` per slice; notes each slice's event ids and when its push returned."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.slices: list[tuple[list[str], float]] = []

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        await asyncio.sleep(self.seconds)
        self.slices.append(([str(p.payload["eventId"]) for p in pushes], time.time()))
        return [None] * len(pushes)

    async def aclose(self) -> None:
        return None


async def one_run(url: str, rows: int, seconds: float) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        await reset_domain(conn)
        rosters = await seed_chats(conn, 10, 3)
        await seed_backlog(conn, list(rosters), rows)
    finally:
        await conn.close()
    pool = await create_pool(
        url, min_size=1, max_size=4, server_settings=DISPATCHER_SERVER_SETTINGS, stateless=True
    )
    try:
        publisher = SlowPublisher(seconds)
        # The defaults, with a pass long enough for every slice of the batch.
        options = RealtimeDispatchOptions(max_run_duration=20.0, lock_ttl=30.0)
        dispatcher = Dispatcher(
            store=OutboxStore(pool, options.backoff),
            builder=default_payload_builder(),
            publisher=publisher,
            options=options,
            metrics=DispatchMetrics(CollectorRegistry()),
            alerts=LogAlertSink(),
        )
        report = await dispatcher.run_pass()
        written = {
            str(r["id"]): r["updated_at"].timestamp()
            for r in await pool.fetch(
                "SELECT id, updated_at FROM messenger.realtime_outbox WHERE status = 'Done'"
            )
        }
    finally:
        await pool.close()
    if report.dispatched != rows or len(written) != rows:
        raise RuntimeError(f"dispatched {report.dispatched} of {rows}")
    waits = [
        max(written[event_id] - returned for event_id in ids) * 1000
        for ids, returned in publisher.slices
    ]
    return {"waits_ms": waits, "pass_s": report.duration}


async def main(args: argparse.Namespace) -> None:
    quiet_production_logging()
    runs: list[dict[str, Any]] = []
    async with scratch_database(args.dsn, "slow_push") as url:
        for _ in range(args.runs):
            runs.append(await one_run(url, args.rows, args.push_seconds))
    slices = len(runs[0]["waits_ms"])
    table = [
        [f"slice {i + 1}", round(median(run["waits_ms"][i] for run in runs), 1)]
        + [round(run["waits_ms"][i], 1) for run in runs]
        for i in range(slices)
    ]
    print(f"push {args.push_seconds} s per slice, {args.rows} rows, {args.runs} runs")
    print_table(["outcome wait, ms", "median", *[f"run {i + 1}" for i in range(args.runs)]], table)
    print(f"pass duration s (median): {median(run['pass_s'] for run in runs):.2f}")
    path = write_json(
        "slow_push",
        {"machine": machine(), "args": vars(args), "runs": runs},
    )
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--push-seconds", type=float, default=0.6)
    parser.add_argument("--runs", type=int, default=3)
    return parse_with_smoke(parser, {"rows": 100, "push_seconds": 0.2, "runs": 1})


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
