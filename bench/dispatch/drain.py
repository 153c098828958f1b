"""Dispatcher drain benchmark: how fast a backlog of real ``MessageReceived`` rows empties.

    python -m bench.dispatch.drain [--dsn DSN] [--rows 50000] [--runs 3] [--done 200000]
                          [--scenarios base,spec_only,done_pile,done_pile_spec_only]
                          [--modes dispatcher,redis,raw] [--key-types uuid,bigint]

For each scenario, in a scratch database ``bench_drain_*`` (dropped at the end), each run:

1. resets the domain and seeds ``--rows`` real messages over 50 chats, each with its Pending
   ``MessageReceived`` outbox row (COPY, not the per-message command); the ``done_pile``
   scenarios first add ``--done`` older Done rows; then VACUUM ANALYZE and CHECKPOINT;
2. ``dispatcher``: drains it through the real ``Dispatcher`` + ``OutboxStore`` + payload builder
   (pool and session settings as ``dispatch_service`` builds them, default options, structlog at
   info as the worker configures it) with a publisher that does nothing;
   ``redis``: the same dispatcher publishing through the Redis backplane's real publisher
   (``RedisHubPublisher``, a batch per message) to a ``redis-server`` of its own, with a
   ``redis-cli`` subscribed to both backplane channels standing in for a hub replica: a
   worker's rows/s with the backplane;
   ``raw``: drains it with a bare asyncpg loop issuing the same ``claim`` and ``mark_done``
   statements from ``QUERIES`` (one connection, no payloads): the floor of the SQL alone.

``--declared`` compares a kind declared in the manifest with the built-in one (issue 48): each run
drains the backlog twice through the dispatcher, with every other row a declared ``BenchPosted``
(``bench/dispatch/_declared.py``: a query of the same columns) and with all rows
``MessageReceived`` (the same
rows rewritten, so both carry the same dead tuples before the VACUUM), in alternating order.

``--key-types uuid,bigint`` measures the owner's key type instead (``REALTIME_KEY_TYPE``): an
owner's schema (``bench/dispatch/_keyed.py``: chats, members, messages, and its manifest) in one
scratch
database per key type, the outbox migrated with that type; each run drains the same backlog in
each (order alternating run by run) through the dispatcher (and ``raw``, if among the modes)
with the payload builder over that manifest and key type. Scenarios and ``done`` do not apply.

Modes alternate within each run so machine noise hits both alike. ``spec_only`` scenarios drop
every outbox index except the primary key and the spec's ``ix_rto_due`` / ``ix_rto_chat``.
Reports rows/s (median of ``--runs``, with min and max) and the CPU seconds used by this process
and by the PostgreSQL server per run; writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry

from bench._common import (
    DEFAULT_DSN,
    CpuMeter,
    NoopPublisher,
    machine,
    median_spread,
    parse_with_smoke,
    print_table,
    private_redis,
    quiet_production_logging,
    reset_domain,
    scratch_database,
    seed_backlog,
    seed_chats,
    server_facts,
    settle,
    write_json,
)
from bench.dispatch import _declared, _keyed
from realtime_dispatch.database.connections import DISPATCHER_SERVER_SETTINGS, create_pool
from realtime_dispatch.dispatch.alerts import LogAlertSink
from realtime_dispatch.dispatch.dispatcher import POOL_SIZE, Dispatcher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.projections.builder import PayloadBuilder
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.outbox.backoff import JITTER
from realtime_dispatch.outbox.queries import QUERIES
from realtime_dispatch.outbox.store import OutboxStore
from realtime_dispatch.values.keys import key_codec

SPEC_INDEXES = {"realtime_outbox_pkey", "ix_rto_due", "ix_rto_chat"}
SCENARIOS: dict[str, dict[str, Any]] = {
    "base": {"spec_only": False, "done": False},
    "spec_only": {"spec_only": True, "done": False},
    "done_pile": {"spec_only": False, "done": True},
    "done_pile_spec_only": {"spec_only": True, "done": True},
}
CHATS = 50
MEMBERS = 5


RUN_FIGURES = ("rows_per_s", "seconds", "client_cpu_s", "server_cpu_s", "machine_busy")


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median and spread of each figure over a scenario's runs."""
    return {key: median_spread([r[key] for r in runs]) for key in RUN_FIGURES}


async def drain_dispatcher(
    url: str,
    options: RealtimeDispatchOptions,
    redis_url: str | None = None,
    builder: PayloadBuilder | None = None,
) -> dict[str, Any]:
    pool = await create_pool(
        url,
        min_size=1,
        max_size=POOL_SIZE,
        server_settings=DISPATCHER_SERVER_SETTINGS,
        stateless=True,
    )
    try:
        # Open the pool's connections before the clock starts.
        conns = [await pool.acquire() for _ in range(POOL_SIZE)]
        for conn in conns:
            await pool.release(conn)
        counted = NoopPublisher()
        publisher: Any = counted
        if redis_url is not None:
            from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher

            publisher = RedisHubPublisher.from_url(redis_url)
        dispatcher = Dispatcher(
            store=OutboxStore(pool, options.backoff),
            builder=builder or default_payload_builder(),
            publisher=publisher,
            options=options,
            metrics=DispatchMetrics(CollectorRegistry()),
            alerts=LogAlertSink(),
        )
        meter = CpuMeter()
        meter.start()
        dispatched = passes = 0
        while True:
            report = await dispatcher.run_pass()
            passes += 1
            dispatched += report.dispatched
            if not report.claimed:
                break
        meter.stop()
        if redis_url is not None:
            await publisher.aclose()
        elif counted.count != dispatched:
            raise RuntimeError(f"published {counted.count}, dispatched {dispatched}")
        return {"rows": dispatched, "meter": meter, "passes": passes}
    finally:
        await pool.close()


async def drain_raw(url: str, options: RealtimeDispatchOptions) -> dict[str, Any]:
    conn = await asyncpg.connect(url, server_settings=dict(DISPATCHER_SERVER_SETTINGS))
    claim, mark_done = QUERIES["claim"], QUERIES["mark_done"]
    o = options
    try:
        meter = CpuMeter()
        meter.start()
        done = 0
        while True:
            records = await conn.fetch(
                claim,
                *(o.batch_size, o.backoff_base, o.backoff_factor, o.backoff_cap, JITTER, []),
                *(1, 0),  # the whole outbox: one partition
            )
            if not records:
                break
            marked = await conn.fetch(
                mark_done, [r["id"] for r in records], [r["row_version"] for r in records]
            )
            done += len(marked)
        meter.stop()
        return {"rows": done, "meter": meter, "passes": 0}
    finally:
        await conn.close()


@contextlib.contextmanager
def hub_stand_in(redis_url: str) -> Iterator[None]:
    """A subscriber to both backplane channels (what a hub replica subscribes to), so that the
    publisher finds a receiver and sends the batch format."""
    from realtime_dispatch.hub.backplane.subscriber import CHANNEL, batch_channel

    port = redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]
    proc = subprocess.Popen(
        ["redis-cli", "-p", port, "SUBSCRIBE", CHANNEL, batch_channel(CHANNEL)],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


async def set_spec_only(conn: asyncpg.Connection, extra: dict[str, str], spec_only: bool) -> None:
    """Drop (or restore) the outbox indexes beyond the spec's."""
    for name, definition in extra.items():
        if spec_only:
            await conn.execute(f"DROP INDEX IF EXISTS messenger.{name}")
        else:
            exists = await conn.fetchval("SELECT to_regclass($1)", f"messenger.{name}")
            if exists is None:
                await conn.execute(definition)


async def run_scenario(
    url: str, name: str, args: argparse.Namespace, extra: dict[str, str]
) -> dict[str, Any]:
    spec = SCENARIOS[name]
    options = RealtimeDispatchOptions()
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    admin = await asyncpg.connect(url)
    try:
        await set_spec_only(admin, extra, spec["spec_only"])
        for run in range(args.runs):
            for mode in modes if run % 2 == 0 else list(reversed(modes)):
                await reset_domain(admin)
                chats = list(await seed_chats(admin, CHATS, MEMBERS))
                done = args.done if spec["done"] else 0
                await seed_backlog(admin, chats, args.rows, done=done)
                await settle(admin)
                if mode == "raw":
                    out = await drain_raw(url, options)
                else:
                    out = await drain_dispatcher(
                        url, options, args.redis if mode == "redis" else None
                    )
                left = await admin.fetchval(
                    "SELECT count(*) FROM messenger.realtime_outbox WHERE status <> 'Done'"
                )
                if out["rows"] != args.rows or left:
                    raise RuntimeError(f"{name}/{mode}: drained {out['rows']}, {left} not Done")
                meter: CpuMeter = out["meter"]
                results[mode].append(
                    {
                        "rows_per_s": out["rows"] / meter.wall,
                        "seconds": meter.wall,
                        "client_cpu_s": meter.client,
                        "server_cpu_s": meter.server,
                        "machine_busy": meter.machine_busy,
                        "passes": out["passes"],
                    }
                )
                rate = out["rows"] / meter.wall
                print(
                    f"  {name:<20} run {run + 1} {mode:<10} {rate:>9,.0f} rows/s"
                    f"  ({meter.wall:.2f} s, client cpu {meter.client:.2f} s,"
                    f" server cpu {meter.server:.2f} s)",
                    flush=True,
                )
        await set_spec_only(admin, extra, False)
    finally:
        await admin.close()
    summary: dict[str, Any] = {"scenario": name, **spec, "done_rows": args.done * spec["done"]}
    for mode, runs in results.items():
        summary[mode] = medians(runs)
    return summary


def _run_record(out: dict[str, Any]) -> dict[str, Any]:
    meter: CpuMeter = out["meter"]
    return {
        "rows_per_s": out["rows"] / meter.wall,
        "seconds": meter.wall,
        "client_cpu_s": meter.client,
        "server_cpu_s": meter.server,
        "machine_busy": meter.machine_busy,
        "passes": out["passes"],
    }


async def run_keyed(args: argparse.Namespace) -> dict[str, Any]:
    """The same backlog drained on uuid and on bigint keys (one database each), alternating."""
    names = args.key_types.split(",")
    modes = [m for m in args.modes.split(",") if m in {"dispatcher", "raw"}]
    options = RealtimeDispatchOptions()
    results: dict[str, list[dict[str, Any]]] = {f"{n}/{m}": [] for n in names for m in modes}
    async with _keyed.keyed_databases(args.dsn, "drain", names) as urls:
        for run in range(args.runs):
            for name in names if run % 2 == 0 else list(reversed(names)):
                keys = key_codec(name)
                builder = default_payload_builder(manifest=_keyed.manifest(keys), keys=keys)
                url = urls[name]
                for mode in modes:
                    admin = await asyncpg.connect(url)
                    try:
                        await _keyed.reset(admin)
                        rosters = await _keyed.seed_chats(admin, keys, CHATS, MEMBERS)
                        await _keyed.seed_backlog(admin, keys, rosters, args.rows)
                        await _keyed.settle(admin)
                        if mode == "raw":
                            out = await drain_raw(url, options)
                        else:
                            out = await drain_dispatcher(url, options, builder=builder)
                        left = await admin.fetchval(
                            "SELECT count(*) FROM messenger.realtime_outbox WHERE status <> 'Done'"
                        )
                    finally:
                        await admin.close()
                    if out["rows"] != args.rows or left:
                        raise RuntimeError(f"{name}/{mode}: drained {out['rows']}, {left} left")
                    record = _run_record(out)
                    results[f"{name}/{mode}"].append(record)
                    print(
                        f"  keys {name:<7} run {run + 1} {mode:<10}"
                        f" {record['rows_per_s']:>9,.0f} rows/s ({record['seconds']:.2f} s,"
                        f" client cpu {record['client_cpu_s']:.2f} s)",
                        flush=True,
                    )
    return {label: medians(runs) for label, runs in results.items()}


async def main_keyed(args: argparse.Namespace, facts: dict[str, Any], started: float) -> None:
    summary = await run_keyed(args)
    print()
    print(f"drain of {args.rows:,} rows by key type, medians of {args.runs} runs")
    rows = [
        [label, s["rows_per_s"]["median"], s["rows_per_s"]["min"], s["rows_per_s"]["max"],
         s["client_cpu_s"]["median"], s["server_cpu_s"]["median"]]
        for label, s in summary.items()
    ]  # fmt: skip
    print_table(["keys/mode", "rows/s", "min", "max", "client cpu s", "server cpu s"], rows)
    path = write_json(
        "drain",
        {
            "benchmark": "drain",
            "args": vars(args),
            "machine": facts,
            "elapsed_s": time.time() - started,
            "key_types": summary,
        },
    )
    print(f"wrote {path}")


async def run_declared(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Half the backlog a declared kind against all of it ``MessageReceived``, alternating."""
    options = RealtimeDispatchOptions()
    builder = default_payload_builder(manifest=_declared.manifest())
    sides = {"builtin": "MessageReceived", "declared_half": _declared.KIND}
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    admin = await asyncpg.connect(url)
    try:
        await _declared.register(admin)
        for run in range(args.runs):
            for side in sides if run % 2 == 0 else list(reversed(sides)):
                await reset_domain(admin)
                chats = list(await seed_chats(admin, CHATS, MEMBERS))
                await seed_backlog(admin, chats, args.rows)
                await _declared.halve(admin, sides[side])
                await settle(admin)
                out = await drain_dispatcher(url, options, builder=builder)
                left = await admin.fetchval(
                    "SELECT count(*) FROM messenger.realtime_outbox WHERE status <> 'Done'"
                )
                if out["rows"] != args.rows or left:
                    raise RuntimeError(f"{side}: drained {out['rows']}, {left} not Done")
                record = _run_record(out)
                results[side].append(record)
                print(
                    f"  {side:<14} run {run + 1} {record['rows_per_s']:>9,.0f} rows/s"
                    f" ({record['seconds']:.2f} s, client cpu {record['client_cpu_s']:.2f} s,"
                    f" server cpu {record['server_cpu_s']:.2f} s)",
                    flush=True,
                )
    finally:
        await admin.close()
    return {side: medians(runs) for side, runs in results.items()}


async def main_declared(args: argparse.Namespace, facts: dict[str, Any], started: float) -> None:
    async with scratch_database(args.dsn, "drain") as url:
        summary = await run_declared(url, args)
    print()
    print(f"drain of {args.rows:,} rows, half of them a declared kind, medians of {args.runs} runs")
    rows = [
        [side, s["rows_per_s"]["median"], s["rows_per_s"]["min"], s["rows_per_s"]["max"],
         s["client_cpu_s"]["median"], s["server_cpu_s"]["median"]]
        for side, s in summary.items()
    ]  # fmt: skip
    print_table(["backlog", "rows/s", "min", "max", "client cpu s", "server cpu s"], rows)
    ratio = (
        summary["declared_half"]["rows_per_s"]["median"]
        / summary["builtin"]["rows_per_s"]["median"]
    )
    print(f"declared_half / builtin = {ratio:.2f}")
    path = write_json(
        "drain",
        {
            "benchmark": "drain",
            "args": vars(args),
            "machine": facts,
            "elapsed_s": time.time() - started,
            "declared": summary,
            "declared_vs_builtin": ratio,
        },
    )
    print(f"wrote {path}")


async def main(args: argparse.Namespace) -> None:
    quiet_production_logging()
    facts = {**machine(), **await server_facts(args.dsn)}
    print(f"machine: {facts}")
    started = time.time()
    if args.declared:
        await main_declared(args, facts, started)
        return
    if args.key_types:
        await main_keyed(args, facts, started)
        return
    scenarios = []
    async with scratch_database(args.dsn, "drain") as url:
        admin = await asyncpg.connect(url)
        extra = {
            r["indexname"]: r["indexdef"]
            for r in await admin.fetch(
                "SELECT indexname, indexdef FROM pg_indexes"
                " WHERE schemaname = 'messenger' AND tablename = 'realtime_outbox'"
            )
            if r["indexname"] not in SPEC_INDEXES
        }
        await admin.close()
        with contextlib.ExitStack() as stack:
            args.redis = None
            if "redis" in args.modes.split(","):
                args.redis, _ = stack.enter_context(private_redis())
                stack.enter_context(hub_stand_in(args.redis))
            for name in args.scenarios.split(","):
                scenarios.append(await run_scenario(url, name, args, extra))
    rows = []
    for s in scenarios:
        for mode in args.modes.split(","):
            m = s[mode]
            rows.append(
                [
                    s["scenario"],
                    mode,
                    m["rows_per_s"]["median"],
                    m["rows_per_s"]["min"],
                    m["rows_per_s"]["max"],
                    m["client_cpu_s"]["median"],
                    m["server_cpu_s"]["median"],
                ]
            )
        if "dispatcher" in s and "raw" in s:
            s["dispatcher_vs_raw"] = (
                s["dispatcher"]["rows_per_s"]["median"] / s["raw"]["rows_per_s"]["median"]
            )
    print()
    print(f"drain of {args.rows:,} rows, medians of {args.runs} runs")
    print_table(["scenario", "mode", "rows/s", "min", "max", "client cpu s", "server cpu s"], rows)
    for s in scenarios:
        if "dispatcher_vs_raw" in s:
            print(f"{s['scenario']}: dispatcher / raw = {s['dispatcher_vs_raw']:.2f}")
    path = write_json(
        "drain",
        {
            "benchmark": "drain",
            "args": vars(args),
            "machine": facts,
            "elapsed_s": time.time() - started,
            "scenarios": scenarios,
        },
    )
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument("--rows", type=int, default=50_000, help="backlog size")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--done", type=int, default=200_000, help="Done rows in done_pile runs")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--modes", default="dispatcher,raw", help="dispatcher, redis, raw")
    parser.add_argument(
        "--key-types",
        default="",
        help="e.g. uuid,bigint: the owner's key types compared on an owner's schema (see above)",
    )
    parser.add_argument(
        "--declared",
        action="store_true",
        help="half the backlog a kind declared in the manifest against all MessageReceived",
    )
    smoke = {"rows": 500, "done": 1000, "runs": 1, "modes": "dispatcher,redis,raw"}
    args = parse_with_smoke(parser, smoke)
    for name in args.scenarios.split(","):
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name}")
    for name in filter(None, args.key_types.split(",")):
        if name not in {"uuid", "bigint", "text"}:
            parser.error(f"unknown key type {name}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
