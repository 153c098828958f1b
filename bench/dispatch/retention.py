"""Retention under a steady insert stream: does the outbox stay bounded, and what does the purge
cost?

    python -m bench.dispatch.retention [--dsn DSN] [--rate 2000] [--duration 600] [--retention 60]
                              [--sample 10] [--writers 4]

In a scratch database ``bench_retention_*`` (dropped at the end): 50 chats with one message
each; ``--writers`` connections commit ``MessageReceived`` outbox rows (one row per commit, an
autocommit INSERT, as an owner's send would add it) at ``--rate`` commits/s in total for
``--duration`` seconds, while the real worker (``dispatch_service``: runner, lock, LISTEN,
retention) drains them through a publisher that does nothing, with
``REALTIME_DISPATCH_RETENTION_DONE = --retention``.

Every ``--sample`` seconds it records the rows by status, the table's size with its indexes
(``pg_total_relation_size``), its dead tuples, and the rows purged so far. The purge's cost is
the wall time of its DELETE statements and of the VACUUMs the runner starts (an upper bound on the
server CPU they take: the server runs on this machine and a delete is CPU-bound there), next to
the CPU seconds of this process and of the PostgreSQL server over the whole run. Writes JSON to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any
from uuid import UUID

import asyncpg

from bench._common import (
    DEFAULT_DSN,
    CpuMeter,
    NoopPublisher,
    machine,
    parse_with_smoke,
    print_table,
    quiet_production_logging,
    scratch_database,
    seed_chats,
    server_facts,
    write_json,
)
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.service import dispatch_service
from realtime_dispatch.values.ids import new_id

INSERT = (
    "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id, seq)"
    " VALUES (messenger.realtime_new_id(), 'MessageReceived', 'ChatGroup', $1, $2, 1)"
)
SAMPLE = """
SELECT count(*) FILTER (WHERE status = 'Pending') AS pending,
       count(*) FILTER (WHERE status = 'Done') AS done,
       pg_total_relation_size('messenger.realtime_outbox') AS bytes,
       (SELECT n_dead_tup FROM pg_stat_user_tables
        WHERE relid = 'messenger.realtime_outbox'::regclass) AS dead
FROM messenger.realtime_outbox
"""


async def seed(url: str) -> list[tuple[UUID, UUID]]:
    """50 chats with one message each: what the committed rows reference."""
    conn = await asyncpg.connect(url)
    try:
        rosters = await seed_chats(conn, 50, 3)
        targets = [(chat, new_id()) for chat in rosters]
        await conn.executemany(
            "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
            " VALUES ($2, $1, 1, $3, 'retention benchmark')",
            [
                (chat, message, users[0])
                for (chat, message), users in zip(targets, rosters.values(), strict=True)
            ],
        )
        await conn.execute("UPDATE messenger.chats SET last_seq = 1")
        return targets
    finally:
        await conn.close()


async def writer(
    url: str, targets: list[tuple[UUID, UUID]], rate: float, until: float, counts: list[int]
) -> None:
    conn = await asyncpg.connect(url)
    try:
        interval = 1.0 / rate
        start = time.monotonic()
        k = 0
        while (now := time.monotonic()) < until:
            due = start + k * interval
            if due > now:
                await asyncio.sleep(due - now)
            chat, message = targets[k % len(targets)]
            await conn.execute(INSERT, chat, message)
            k += 1
        counts.append(k)
    finally:
        await conn.close()


class PurgeClock:
    """Wraps the store's ``purge_done`` (total and longest statement time, rows deleted) and
    ``vacuum`` (the runner's VACUUMs when dead versions pile up: part of the purge's cost)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.longest = 0.0
        self.statements = 0
        self.rows = 0
        self.vacuum_seconds = 0.0
        self.vacuums = 0

    def wrap(self, store: Any) -> None:
        inner = store.purge_done

        async def timed(**kwargs: Any) -> int:
            t0 = time.perf_counter()
            deleted = int(await inner(**kwargs))
            spent = time.perf_counter() - t0
            self.seconds += spent
            self.longest = max(self.longest, spent)
            self.statements += 1
            self.rows += deleted
            return deleted

        store.purge_done = timed
        vacuum = store.vacuum

        async def timed_vacuum() -> None:
            t0 = time.perf_counter()
            await vacuum()
            self.vacuum_seconds += time.perf_counter() - t0
            self.vacuums += 1

        store.vacuum = timed_vacuum


async def main(args: argparse.Namespace) -> None:
    quiet_production_logging()
    facts = {"machine": machine(), "server": await server_facts(args.dsn), "args": vars(args)}
    async with scratch_database(args.dsn, "retention") as url:
        targets = await seed(url)
        options = RealtimeDispatchOptions(retention_done=args.retention)
        clock = PurgeClock()
        samples: list[dict[str, Any]] = []
        meter = CpuMeter()
        async with dispatch_service(url, options, NoopPublisher()) as service:
            clock.wrap(service.dispatcher.store)
            probe = await asyncpg.connect(url)
            meter.start()
            started = time.monotonic()
            until = started + args.duration
            counts: list[int] = []
            writers = [
                asyncio.create_task(writer(url, targets, args.rate / args.writers, until, counts))
                for _ in range(args.writers)
            ]
            while (now := time.monotonic()) < until:
                await asyncio.sleep(min(args.sample, until - now))
                r = await probe.fetchrow(SAMPLE)
                sample = {
                    "t": round(time.monotonic() - started),
                    "pending": r["pending"],
                    "done": r["done"],
                    "mib": round(r["bytes"] / 2**20, 1),
                    "dead": r["dead"],
                    "purged": clock.rows,
                    "purge_s": round(clock.seconds, 2),
                    "vacuum_s": round(clock.vacuum_seconds, 2),
                    "batch": service.runner.retention.batch,
                }
                if not samples:
                    print("  ".join(sample))
                samples.append(sample)
                print("  ".join(str(v) for v in sample.values()), flush=True)
            await asyncio.gather(*writers)
            meter.stop()
            await probe.close()
    wall = meter.wall
    committed = sum(counts)
    after_warmup = [s for s in samples if s["t"] >= 2 * args.retention] or samples
    summary = {
        "committed": committed,
        "commits_per_s": committed / wall,
        "purged_rows": clock.rows,
        "purged_per_s": clock.rows / wall,
        "purge_seconds": clock.seconds,
        "purge_share_of_one_core": clock.seconds / wall,
        "purge_us_per_row": 1e6 * clock.seconds / clock.rows if clock.rows else None,
        "purge_longest_statement_s": clock.longest,
        "purge_statements": clock.statements,
        "vacuums": clock.vacuums,
        "vacuum_seconds": clock.vacuum_seconds,
        "purge_and_vacuum_share_of_one_core": (clock.seconds + clock.vacuum_seconds) / wall,
        "rows_max_after_warmup": max(s["pending"] + s["done"] for s in after_warmup),
        "mib_max_after_warmup": max(s["mib"] for s in after_warmup),
        "mib_first_after_warmup": after_warmup[0]["mib"],
        "mib_last": samples[-1]["mib"],
        "client_cpu_s": meter.client,
        "server_cpu_s": meter.server,
        "machine_busy": meter.machine_busy,
        "wall_s": wall,
    }
    print()
    print_table(["metric", "value"], [[k, v] for k, v in summary.items()])
    path = write_json("retention", {**facts, "samples": samples, "summary": summary})
    print(f"\nwrote {path}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", default=DEFAULT_DSN)
    p.add_argument("--rate", type=float, default=2000.0, help="commits per second in total")
    p.add_argument("--duration", type=float, default=600.0, help="seconds (default 10 minutes)")
    p.add_argument("--retention", type=float, default=60.0, help="RETENTION_DONE, seconds")
    p.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--writers", type=int, default=8, help="committing connections")
    smoke = {"rate": 200.0, "duration": 4.0, "retention": 1.0, "sample": 1.0, "writers": 2}
    return parse_with_smoke(p, smoke)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
