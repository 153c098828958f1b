"""Persist→publish lag benchmark: owners commit at a fixed rate, the dispatcher runs as
``dispatch_service`` builds it (timer + LISTEN wake, advisory lock, idle flag), and a recording
publisher notes when each row is pushed.

    python -m bench.dispatch.lag [--dsn DSN] [--rate 2000] [--seconds 10] [--runs 3]
                        [--owners 8] [--processes 2] [--scenarios notify,poll,ceiling]
                        [--key-types uuid,bigint] [--linger SECONDS]

Scenarios (each in a scratch database ``bench_lag_*``, dropped at the end):

* ``notify``: owners run the real ``send_message`` command (domain rows + outbox row in one
  transaction) at ``--rate`` commits/s in total, spread over ``--owners`` connections in
  ``--processes`` processes (apart from the dispatcher's process, so that neither steals the
  other's event loop). Each owner records ``time.time()`` right after COMMIT returns, with the
  outbox id and message id it got back. The publisher records ``time.time()`` per push; a push is
  matched to its outbox row through the message id in its payload.
  lag = publish time − owner commit time. The first second is warm-up and not counted.
* ``poll``: the same with ``listen=False`` (``polling_interval`` 1 s is the only wake).
* ``half_builtin`` / ``half_declared`` (issue 48): ``notify`` with owners writing a message and
  its outbox row by plain SQL, every other row (even seq) of a kind declared in the manifest
  (``bench/dispatch/_declared.py``) in ``half_declared``, all ``MessageReceived`` in
  ``half_builtin``; the
  dispatcher runs over the manifest that declares it in both. ``all_declared``: every row of
  the declared kind (one statement per batch again, as in ``half_builtin``).
* ``ceiling``: owners commit as fast as they can for ``--ceiling-seconds`` with the dispatcher
  running (LISTEN on), once with the shipped idle-flag trigger and once with the trigger
  replaced (in the scratch database only) by one that always notifies: the commit rate ceiling
  of each.

``--key-types uuid,bigint`` measures the owner's key type instead (``REALTIME_KEY_TYPE``):
``notify`` on an owner's schema (``bench/dispatch/_keyed.py``) in one scratch database per key
type, the outbox
migrated with that type, owners writing a message (its id made by the database) and its outbox
row in one transaction; the dispatcher builds payloads over that schema's manifest. Each run
goes through the key types in turn, the order alternating run by run.

Reports medians of ``--runs`` (with min and max) and writes JSON to ``bench/results/``. The
dispatcher (and the ``raw`` floor, in the same process) runs on uvloop, as ``worker`` and
``serve`` run it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import uvloop

from bench._common import (
    DEFAULT_DSN,
    CpuMeter,
    machine,
    median_spread,
    module_command,
    parse_with_smoke,
    print_table,
    quiet_production_logging,
    reset_domain,
    scratch_database,
    seed_chats,
    server_facts,
    settle,
    write_json,
)
from bench.dispatch import _declared, _keyed
from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.service import DispatchService, dispatch_service
from realtime_dispatch.messenger.commands import send_message
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind
from realtime_dispatch.values.ids import new_id
from realtime_dispatch.values.keys import Key, key_codec
from support.stats import percentile

WARMUP = 1.0  # seconds at the start of a run that are not counted
CHATS_PER_OWNER = 4

# The trigger as 0001 shipped it (before 0003): every writer takes the shared lock and waits.
TRIGGER_0001 = """
CREATE OR REPLACE FUNCTION messenger.realtime_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('realtime_outbox:wake', 0));
    IF EXISTS (SELECT 1 FROM messenger.realtime_dispatch_state WHERE idle) THEN
        PERFORM pg_notify('realtime_outbox', '');
    END IF;
    RETURN NULL;
END
$$
"""
ALWAYS_NOTIFY = """
CREATE OR REPLACE FUNCTION messenger.realtime_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('realtime_outbox:wake', 0));
    PERFORM pg_notify('realtime_outbox', '');
    RETURN NULL;
END
$$
"""
# The ``raw`` floor's one statement per wake: take every pending row, say which messages.
RAW_TAKE = """
UPDATE messenger.realtime_outbox SET status = 'Done'
WHERE status = 'Pending'
RETURNING message_id::text
"""
# Trigger bodies to compare (None: the one the migrations installed).
TRIGGERS = {"idle_flag": None, "idle_flag_0001": TRIGGER_0001, "always_notify": ALWAYS_NOTIFY}


class StampingPublisher:
    """Accepts every push and notes ``time.time()`` for it, by message id."""

    def __init__(self) -> None:
        self.published: dict[str, float] = {}
        self.count = 0
        self._changed = asyncio.Event()

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        now = time.time()
        for push in pushes:
            # Only the owners' messages are counted: a job beside the run (``lag_run``'s
            # ``beside``) pushes other kinds through the same dispatcher.
            message_id = push.payload.get("messageId")
            if message_id is not None:
                self.published[str(message_id)] = now
                self.count += 1
        self._changed.set()
        return [None] * len(pushes)

    async def reached(self, count: int) -> None:
        while self.count < count:
            self._changed.clear()
            await self._changed.wait()

    async def aclose(self) -> None:
        return None


# --- owner process ------------------------------------------------------------------------------


async def _owner(
    conn: asyncpg.Connection,
    chats: Sequence[tuple[Key, Key]],
    *,
    rate: float,
    start_at: float,
    seconds: float,
    offset: float,
    command: str,
) -> list[tuple[str, str, float]]:
    """One owner connection: ``send_message`` at ``rate`` per second (0 = as fast as it can)
    from ``start_at`` + ``offset`` for ``seconds``; returns (outbox id, message id, commit ts)."""
    out: list[tuple[str, str, float]] = []
    seqs: dict[Key, int] = {}  # enqueue owners: this owner is its chats' only writer
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = start_at + seconds
    due = start_at + offset
    n = 0
    while True:
        if rate:
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            due += 1.0 / rate
        if time.time() >= end:
            break
        chat, sender = chats[n % len(chats)]
        if command == "keyed":
            seqs[chat] = seq = seqs.get(chat, 0) + 1
            outbox_id, message_id = await _keyed.send(conn, chat, sender, seq, f"lag {n}")
        elif command in {"send_message", "send_idempotent"}:
            assert isinstance(chat, UUID)
            assert isinstance(sender, UUID)
            # send_idempotent: the same send under a fresh clientMessageId (the claim row);
            # plain sends pass no such argument, so older revisions can run this too.
            extra = {"client_message_id": uuid4().hex} if command == "send_idempotent" else {}
            sent = await send_message(conn, chat_id=chat, sender=sender, body=f"lag {n}", **extra)
            outbox_id, message_id = sent.outbox_id, sent.message_id
        elif command in {"half_builtin", "half_declared", "all_declared"}:
            assert isinstance(chat, UUID)
            assert isinstance(sender, UUID)
            seqs[chat] = seq = seqs.get(chat, 0) + 1
            declared = command == "all_declared" or (command == "half_declared" and seq % 2 == 0)
            kind = _declared.KIND if declared else "MessageReceived"
            outbox_id, message_id = await _insert_kind(conn, chat, sender, seq, n, kind=kind)
        else:
            assert isinstance(chat, UUID)
            assert isinstance(sender, UUID)
            seqs[chat] = seq = seqs.get(chat, 0) + 1
            outbox_id, message_id = await _insert_and_enqueue(conn, chat, sender, seq, n)
        out.append((str(outbox_id), str(message_id), time.time()))
        n += 1
    return out


async def _insert_message(
    conn: asyncpg.Connection, message_id: UUID, *, chat: UUID, sender: UUID, seq: int, n: int
) -> None:
    """The message row both owner shapes write (the per-chat seq kept by its only writer)."""
    await conn.execute(
        "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
        " VALUES ($1, $2, $3, $4, $5)",
        message_id,
        chat,
        seq,
        sender,
        f"lag {n}",
    )


async def _insert_and_enqueue(
    conn: asyncpg.Connection, chat: UUID, sender: UUID, seq: int, n: int
) -> tuple[UUID, UUID]:
    """A lighter owner transaction: a message row (per-chat seq kept by its only writer) and
    its push intent through ``enqueue``; 4 round trips instead of ``send_message``'s 6."""
    message_id = new_id()
    async with conn.transaction():
        await _insert_message(conn, message_id, chat=chat, sender=sender, seq=seq, n=n)
        [outbox_id] = await enqueue(
            conn,
            OutboxIntent(
                kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
                target_kind=RealtimeTargetKind.CHAT_GROUP,
                chat_id=chat,
                message_id=message_id,
                seq=seq,
            ),
        )
    return outbox_id, message_id


async def _insert_kind(
    conn: asyncpg.Connection, chat: UUID, sender: UUID, seq: int, n: int, *, kind: str
) -> tuple[UUID, UUID]:
    """A message row and its outbox row of ``kind`` by plain SQL (the message as ``ref_id``
    too, which a declared kind's query reads): the same statements whatever the kind."""
    message_id = new_id()
    async with conn.transaction():
        await _insert_message(conn, message_id, chat=chat, sender=sender, seq=seq, n=n)
        outbox_id = await conn.fetchval(
            "INSERT INTO messenger.realtime_outbox"
            " (kind, target_kind, chat_id, message_id, ref_id, seq)"
            " VALUES ($1, 'ChatGroup', $2, $3, $3, $4) RETURNING id",
            kind,
            chat,
            message_id,
            seq,
        )
    return outbox_id, message_id


async def _owner_process(spec: dict[str, Any]) -> list[tuple[str, str, float]]:
    """Connect every owner, say ``ready`` on stdout, and start at the time read from stdin: the
    parent starts the clock only once every process is connected, however slowly a loaded
    machine starts them."""
    keys = key_codec(spec.get("key_type", "uuid"))
    conns = [await asyncpg.connect(spec["dsn"]) for _ in spec["chats"]]
    try:
        print("ready", flush=True)
        start_at = float(await asyncio.to_thread(sys.stdin.readline))
        tasks = [
            _owner(
                conn,
                [(keys.from_claim(c), keys.from_claim(s)) for c, s in chats],
                rate=spec["rate"],
                start_at=start_at,
                seconds=spec["seconds"],
                offset=offset,
                command=spec["command"],
            )
            for conn, chats, offset in zip(conns, spec["chats"], spec["offsets"], strict=True)
        ]
        results = await asyncio.gather(*tasks)
    finally:
        for conn in conns:
            await conn.close()
    return [row for rows in results for row in rows]


async def _until_ready(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while (line := await proc.stdout.readline()) != b"ready\n":
        if not line:
            raise RuntimeError("an owner process exited before it was ready")


def _read_rows(paths: list[str]) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    for path in paths:
        rows.extend((a, b, c) for a, b, c in json.loads(Path(path).read_text()))
    return rows


async def run_owners(
    url: str,
    rosters: dict[Key, list[Key]],
    *,
    owners: int,
    processes: int,
    rate: float,
    seconds: float,
    command: str,
    key_type: str = "uuid",
) -> list[tuple[str, str, float]]:
    """Run ``owners`` owner connections in ``processes`` child processes; total ``rate``/s."""
    pairs = [(str(chat), str(users[0])) for chat, users in rosters.items()]
    per_owner = [pairs[i::owners] for i in range(owners)]
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        outs = []
        for p in range(processes):
            mine = list(range(p, owners, processes))
            out = os.path.join(tmp, f"owners-{p}.json")
            outs.append(out)
            spec = {
                "dsn": url,
                "chats": [per_owner[i] for i in mine],
                "rate": rate / owners if rate else 0.0,
                "seconds": seconds,
                # Owner i starts i/rate late: the owners' commits interleave evenly.
                "offsets": [i / rate if rate else 0.0 for i in mine],
                "command": command,
                "key_type": key_type,
                "out": out,
            }
            procs.append(
                await asyncio.create_subprocess_exec(
                    *module_command(__spec__.name),
                    "--owner-process",
                    json.dumps(spec),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        try:
            for proc in procs:
                await _until_ready(proc)
            start_at = time.time() + 0.2
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{start_at}\n".encode())
                await proc.stdin.drain()
            for proc in procs:
                if await proc.wait() != 0:
                    raise RuntimeError("an owner process failed")
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        return _read_rows(outs)


# --- scenarios ------------------------------------------------------------------------------------


async def fresh_state(url: str, chats: int, key_type: str | None = None) -> dict[Key, list[Key]]:
    """The reference messenger's chats, or (``key_type``) the owner's schema of ``_keyed``."""
    conn = await asyncpg.connect(url)
    try:
        rosters: dict[Key, list[Key]]
        if key_type is None:
            await reset_domain(conn)
            rosters = dict(await seed_chats(conn, chats, 3))
            await settle(conn)
        else:
            await _keyed.reset(conn)
            rosters = await _keyed.seed_chats(conn, key_codec(key_type), chats, 3)
            await _keyed.settle(conn)
    finally:
        await conn.close()
    return rosters


@contextlib.asynccontextmanager
async def trigger(url: str, body: str | None) -> AsyncIterator[None]:
    """Install the trigger function ``body`` (None: keep the migrated one); restore it after."""
    admin = await asyncpg.connect(url)
    shipped = await admin.fetchval(
        "SELECT pg_get_functiondef('messenger.realtime_outbox_notify()'::regprocedure)"
    )
    try:
        if body is not None:
            await admin.execute(body)
        yield
    finally:
        await admin.execute(shipped)
        await admin.close()


Beside = Callable[[str], contextlib.AbstractAsyncContextManager[object]]
"""Other work in the dispatcher's process for the run (e.g. ``bench/dispatch/media_jobs.py``'s
sweep): entered once the dispatcher runs, before the owners start; exited after the last
push was heard."""


async def lag_run(
    url: str,
    args: argparse.Namespace,
    *,
    listen: bool,
    body: str | None = None,
    beside: Beside | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """``command``: the owners' (``half_builtin`` / ``half_declared``: over a manifest that
    declares ``_declared.KIND``, registered first)."""
    rosters = await fresh_state(url, args.owners * CHATS_PER_OWNER)
    manifest = None
    if command in {"half_builtin", "half_declared", "all_declared"}:
        manifest = _declared.manifest()
        admin = await asyncpg.connect(url)
        try:
            await _declared.register(admin)
        finally:
            await admin.close()
    options = replace(RealtimeDispatchOptions(), listen=listen)
    if args.linger is not None:
        options = replace(options, linger=args.linger)
    publisher = StampingPublisher()
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(trigger(url, body))
        service = await stack.enter_async_context(
            dispatch_service(url, options, publisher, manifest=manifest)
        )
        if beside is not None:
            await stack.enter_async_context(beside(url))
        return await heard_window(
            url,
            rosters,
            args,
            options=options,
            publisher=publisher,
            service=service,
            command=command,
        )


async def keyed_run(url: str, args: argparse.Namespace, key_type: str) -> dict[str, Any]:
    """``notify`` on the owner's schema of ``_keyed`` with keys of ``key_type``."""
    keys = key_codec(key_type)
    rosters = await fresh_state(url, args.owners * CHATS_PER_OWNER, key_type)
    options = RealtimeDispatchOptions()
    publisher = StampingPublisher()
    manifest = _keyed.manifest(keys)
    async with dispatch_service(url, options, publisher, manifest=manifest, keys=keys) as service:
        return await heard_window(
            url,
            rosters,
            args,
            options=options,
            publisher=publisher,
            service=service,
            command="keyed",
            key_type=key_type,
        )


async def heard_window(
    url: str,
    rosters: dict[Key, list[Key]],
    args: argparse.Namespace,
    *,
    options: RealtimeDispatchOptions,
    publisher: StampingPublisher,
    service: DispatchService,
    **owners: Any,
) -> dict[str, Any]:
    """The measured window of a run whose dispatcher is up: the owners' load, then until the
    publisher has heard every commit (or a polling interval and 5 s more)."""
    await asyncio.sleep(0.5)  # first pass done, idle flag set
    meter = CpuMeter()
    meter.start()
    commits = await owners_at(url, rosters, args, **owners)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(publisher.reached(len(commits)), options.polling_interval + 5)
    meter.stop()
    return lag_figures(commits, publisher.published, meter, service.runner.passes_run)


async def owners_at(
    url: str,
    rosters: dict[Key, list[Key]],
    args: argparse.Namespace,
    *,
    rate: float | None = None,
    seconds: float | None = None,
    command: str | None = None,
    key_type: str = "uuid",
) -> list[tuple[str, str, float]]:
    """``run_owners`` at the run's settings, but for what a scenario sets itself."""
    return await run_owners(
        url,
        rosters,
        owners=args.owners,
        processes=args.processes,
        rate=args.rate if rate is None else rate,
        seconds=args.seconds if seconds is None else seconds,
        command=command or args.owner_command,
        key_type=key_type,
    )


async def main_keyed(args: argparse.Namespace, facts: dict[str, Any], started: float) -> None:
    names = args.key_types.split(",")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    async with _keyed.keyed_databases(args.dsn, "lag", names) as urls:
        for run in range(args.runs):
            for name in names if run % 2 == 0 else list(reversed(names)):
                r = await keyed_run(urls[name], args, name)
                runs[name].append(r)
                print(f"  keys {name:<7} run {run + 1}: {_lag_line(r)}", flush=True)
    results = {name: {"runs": rs, "summary": summarize(rs)} for name, rs in runs.items()}
    print()
    print(f"lag by key type at {args.rate:,.0f} commits/s target, medians of {args.runs} runs (ms)")
    table = []
    for name in names:
        s = results[name]["summary"]
        table.append(
            [
                name,
                s["commit_rate"]["median"],
                s["p50_ms"]["median"],
                f"{s['p50_ms']['min']:.1f}–{s['p50_ms']['max']:.1f}",
                s["p95_ms"]["median"],
                f"{s['p95_ms']['min']:.1f}–{s['p95_ms']['max']:.1f}",
                s["p99_ms"]["median"],
                s["dispatcher_cpu_s"]["median"],
            ]
        )
    headers = ["keys", "commits/s", "p50", "p50 range", "p95", "p95 range", "p99", "cpu s"]
    print_table(headers, table)
    path = write_json(
        "lag",
        {
            "benchmark": "lag",
            "args": vars(args),
            "machine": facts,
            "elapsed_s": time.time() - started,
            "key_types": results,
        },
    )
    print(f"wrote {path}")


async def raw_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The floor: the same owners and the shipped trigger (the idle flag left set, so every
    commit notifies, as it wakes an idle dispatcher), and in place of the dispatcher one
    connection that LISTENs and, per wake, takes the pending rows in one statement and stamps
    them: no lock, no claim batches, no payloads, no publisher."""
    rosters = await fresh_state(url, args.owners * CHATS_PER_OWNER)
    heard: dict[str, float] = {}
    woken = asyncio.Event()
    conn = await asyncpg.connect(url)
    meter = CpuMeter()

    async def take() -> None:
        while True:
            await woken.wait()
            woken.clear()
            rows = await conn.fetch(RAW_TAKE)
            now = time.time()
            for row in rows:
                heard[row[0]] = now

    def on_notify(*_: object) -> None:
        woken.set()

    taker = asyncio.create_task(take())
    try:
        await conn.add_listener("realtime_outbox", on_notify)
        meter.start()
        commits = await owners_at(url, rosters, args)
        deadline = time.monotonic() + 5
        while len(heard) < len(commits) and time.monotonic() < deadline:
            woken.set()  # a row whose wake was folded into an earlier take
            await asyncio.sleep(0.05)
        meter.stop()
    finally:
        taker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await taker
        await conn.close()
    return lag_figures(commits, heard, meter, passes=0)


def lag_figures(
    commits: list[tuple[str, str, float]], published: dict[str, float], meter: CpuMeter, passes: int
) -> dict[str, Any]:
    """Lag percentiles of the commits after the warm-up, matched by message id."""
    first = min(ts for _, _, ts in commits)
    counted = [(m, ts) for _, m, ts in commits if ts >= first + WARMUP]
    missing = sum(1 for m, _ in counted if m not in published)
    lags = sorted((published[m] - ts) * 1000 for m, ts in counted if m in published)
    window = max(ts for _, ts in counted) - min(ts for _, ts in counted)
    return {
        "commits": len(commits),
        "counted": len(counted),
        "missing": missing,
        "commit_rate": len(counted) / window if window > 0 else 0.0,
        "p50_ms": percentile(lags, 0.50),
        "p95_ms": percentile(lags, 0.95),
        "p99_ms": percentile(lags, 0.99),
        "max_ms": lags[-1],
        "min_ms": lags[0],
        "passes": passes,
        "dispatcher_cpu_s": meter.client,
        "machine_busy": meter.machine_busy,
    }


async def ceiling_run(url: str, args: argparse.Namespace, *, body: str | None) -> dict[str, Any]:
    rosters = await fresh_state(url, args.owners * CHATS_PER_OWNER)
    publisher = StampingPublisher()
    options = RealtimeDispatchOptions()
    async with trigger(url, body), dispatch_service(url, options, publisher) as service:
        await asyncio.sleep(0.5)
        commits = await owners_at(url, rosters, args, rate=0.0, seconds=args.ceiling_seconds)
        passes = service.runner.passes_run
    first = min(ts for _, _, ts in commits)
    counted = [ts for _, _, ts in commits if ts >= first + WARMUP]
    window = max(counted) - min(counted)
    return {"commits": len(commits), "commit_rate": len(counted) / window, "passes": passes}


def _lag_line(r: dict[str, Any]) -> str:
    return (
        f"{r['commit_rate']:7,.0f} commits/s, lag p50 {r['p50_ms']:.1f} p95 {r['p95_ms']:.1f}"
        f" p99 {r['p99_ms']:.1f} max {r['max_ms']:.1f} ms, {r['missing']} missing,"
        f" {r['passes']} passes, machine busy {r['machine_busy']:.0%}"
    )


def floor_ratios(runs: list[dict[str, Any]], floor: list[dict[str, Any]]) -> dict[str, float]:
    """The dispatcher's lag over the floor's: median of the per-run ratios (runs alternate, so
    run i of each saw the same machine)."""
    return {
        key: round(statistics.median(r[key] / f[key] for r, f in zip(runs, floor, strict=True)), 2)
        for key in ("p50_ms", "p95_ms", "p99_ms")
        if all(f[key] > 0 for f in floor)
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    return {k: median_spread([r[k] for r in runs]) for k in keys}


LAG_SCENARIOS: dict[str, Callable[[str, argparse.Namespace], Awaitable[dict[str, Any]]]] = {
    "raw": raw_run,
    "notify": lambda url, args: lag_run(url, args, listen=True),
    "notify_0001": lambda url, args: lag_run(url, args, listen=True, body=TRIGGER_0001),
    "poll": lambda url, args: lag_run(url, args, listen=False),
    # Issue 48: every other row a kind declared in the manifest, against all MessageReceived
    # written by the same statements.
    "half_builtin": lambda url, args: lag_run(url, args, listen=True, command="half_builtin"),
    "half_declared": lambda url, args: lag_run(url, args, listen=True, command="half_declared"),
    "all_declared": lambda url, args: lag_run(url, args, listen=True, command="all_declared"),
}


async def main(args: argparse.Namespace) -> None:
    quiet_production_logging()
    facts = {**machine(), **await server_facts(args.dsn)}
    print(f"machine: {facts}")
    started = time.time()
    if args.key_types:
        await main_keyed(args, facts, started)
        return
    results: dict[str, Any] = {}
    scenarios = args.scenarios.split(",")
    unknown = set(scenarios) - {*LAG_SCENARIOS, "ceiling"}
    if unknown:
        raise SystemExit(f"unknown scenario {', '.join(sorted(unknown))}")
    async with scratch_database(args.dsn, "lag") as url:
        # The lag scenarios alternate within each run, so a change in the machine's load falls
        # on the dispatcher and on its floor alike; the ceiling runs after them.
        lagging = [name for name in scenarios if name in LAG_SCENARIOS]
        lag_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in lagging}
        for run in range(args.runs):
            for name in lagging:
                r = await LAG_SCENARIOS[name](url, args)
                lag_runs[name].append(r)
                print(f"  {name} run {run + 1}: {_lag_line(r)}", flush=True)
        for name, runs in lag_runs.items():
            results[name] = {"runs": runs, "summary": summarize(runs)}
        if "ceiling" in scenarios:
            for variant, body in TRIGGERS.items():
                runs = []
                for run in range(args.runs):
                    r = await ceiling_run(url, args, body=body)
                    runs.append(r)
                    print(
                        f"  ceiling {variant:<14} run {run + 1}: {r['commit_rate']:7,.0f}"
                        f" commits/s, {r['passes']} passes",
                        flush=True,
                    )
                results[f"ceiling_{variant}"] = {"runs": runs, "summary": summarize(runs)}
    print()
    print(f"lag at {args.rate:,.0f} commits/s target, medians of {args.runs} runs (ms)")
    table = []
    for name in (
        "raw",
        "notify",
        "notify_0001",
        "poll",
        "half_builtin",
        "half_declared",
        "all_declared",
    ):
        if name in results:
            s = results[name]["summary"]
            table.append(
                [
                    name,
                    s["commit_rate"]["median"],
                    s["p50_ms"]["median"],
                    s["p95_ms"]["median"],
                    f"{s['p95_ms']['min']:.1f}–{s['p95_ms']['max']:.1f}",
                    s["p99_ms"]["median"],
                    s["max_ms"]["median"],
                ]
            )
    if table:
        print_table(["wake", "commits/s", "p50", "p95", "p95 range", "p99", "max"], table)
    if "half_builtin" in results and "half_declared" in results:
        results["declared_vs_builtin"] = floor_ratios(
            results["half_declared"]["runs"], results["half_builtin"]["runs"]
        )
        print(f"half declared against all built-in: {results['declared_vs_builtin']}")
    if "raw" in results and "notify" in results:
        results["notify_vs_raw"] = floor_ratios(results["notify"]["runs"], results["raw"]["runs"])
        print(f"notify against the raw floor: {results['notify_vs_raw']}")
    for variant in TRIGGERS:
        key = f"ceiling_{variant}"
        if key in results:
            s = results[key]["summary"]["commit_rate"]
            print(
                f"owner commit ceiling, {variant}: {s['median']:,.0f} commits/s"
                f" (min {s['min']:,.0f}, max {s['max']:,.0f})"
            )
    path = write_json(
        "lag",
        {
            "benchmark": "lag",
            "args": vars(args),
            "machine": facts,
            "elapsed_s": time.time() - started,
            "results": results,
        },
    )
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument("--rate", type=float, default=2000.0, help="owner commits/s in total")
    parser.add_argument("--rows", type=int, default=None, help="rows per run (sets --seconds)")
    parser.add_argument("--seconds", type=float, default=10.0, help="owner load per run")
    parser.add_argument("--ceiling-seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--owners", type=int, default=8, help="owner connections")
    parser.add_argument("--processes", type=int, default=2, help="owner processes")
    parser.add_argument(
        "--scenarios", default="notify,poll,ceiling", help="notify, raw, poll, ceiling, notify_0001"
    )
    parser.add_argument(
        "--owner-command",
        choices=("send_message", "send_idempotent", "enqueue"),
        default="send_message",
        help="owner transaction: the real send_message command, or message INSERT + enqueue",
    )
    parser.add_argument(
        "--key-types",
        default="",
        help="e.g. uuid,bigint: notify on an owner's schema keyed by each type (see above)",
    )
    parser.add_argument(
        "--linger",
        type=float,
        default=None,
        help="the dispatcher's linger in seconds for notify and poll (default: the shipped one)",
    )
    parser.add_argument("--owner-process", help=argparse.SUPPRESS)
    smoke = {"rate": 200.0, "seconds": 2.0, "ceiling_seconds": 1.5, "runs": 1, "owners": 2,
             "processes": 1, "scenarios": "raw,notify,poll,ceiling"}  # fmt: skip
    args = parse_with_smoke(parser, smoke)
    for name in filter(None, args.key_types.split(",")):
        if name not in {"uuid", "bigint", "text"}:
            parser.error(f"unknown key type {name}")
    if args.rows:
        args.seconds = args.rows / args.rate
    return args


if __name__ == "__main__":
    cli = parse_args()
    if cli.owner_process:
        spec = json.loads(cli.owner_process)
        rows = uvloop.run(_owner_process(spec))
        Path(spec["out"]).write_text(json.dumps(rows))
    else:
        # On uvloop, as the ``worker`` and ``serve`` commands run the dispatcher (and the floor
        # beside it, on the same loop).
        uvloop.run(main(cli))
