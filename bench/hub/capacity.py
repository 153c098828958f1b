"""Capacity of one hub replica: 15,000 authenticated WebSocket connections, 1% of them in active
chats receiving pushes at 10,000 deliveries/s.

    python -m bench.hub.capacity [--clients 15000] [--active-fraction 0.01] [--chat-size 10]
                                 [--rate 10000] [--seconds 20] [--idle 15] [--runs 1]

1. A scratch database ``bench_capacity_*`` (``--dsn``; dropped at the end), migrated, with
   ``--clients`` users (one connection each). ``--active-fraction`` of them, spread over the
   index range, are in active chats of ``--chat-size`` members made with the messenger's own
   ``create_chat``; every other user is in one quiet chat of ``--quiet-chat-size`` (0: in no
   chat), so each connection joins ``user:{id}`` and one ``chat:{id}`` group at connect, as a
   user of the messenger does (written with COPY: nothing is ever pushed to them).
2. One hub replica the way an operator runs it: ``realtime-dispatch hub --host 127.0.0.1 --port
   P`` with ``REALTIME_DATABASE_URL``, ``REALTIME_HUB_JWT_SECRET``, ``REALTIME_HUB_SERVICE_KEY``
   and nothing else (every limit at its default, logs at ``--hub-log-level``, default info, as
   shipped, to a file).
3. One clients process (``bench/hub/_capacity_clients.py``: picows on uvloop, no task per
   connection) opens the connections, ``--in-flight`` at a time: an HS256 token per user in the
   ``Authorization`` header, the JSON hub protocol handshake, then a ping record every
   ``--ping-every`` s (15, SignalR's keepalive), spread evenly over time. The hub caps open
   connections per client address (``REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT``, 1,000), so the
   connections come from ``--per-address`` (1,000) per loopback source address: 127.0.0.2,
   127.0.0.3, …  Connect rate = connections / wall time from the first connect to the last
   handshake answered; the hub's CPU over that phase per connection (the token check and the
   membership query of every connect included). Every connect must succeed.
4. Idle: ``--settle`` s after the last connect, the hub's RSS per connection (RSS then less RSS
   before the first client, over N), then its CPU over ``--idle`` s of pings only.
5. Load: this process pushes to the active chats' groups ``chat:{id}`` at ``--rate``
   deliveries/s (``--rate`` / ``--chat-size`` pushes/s, round-robin over the chats) for
   ``--seconds`` s, a batch every ``--tick`` s (10 ms) as the pushes fall due, each one ``POST
   /api/v1/hubs/messenger/batch`` with the body the worker's publisher sends: by a minimal
   keep-alive HTTP/1.1 client (``--publisher raw``, the default, a few hundred µs of CPU a
   request) or through the worker's own ``HttpHubPublisher`` (``--publisher worker``, httpx:
   milliseconds a request, taken from the hub on a 2-core machine). A push's payload is a
   ``message_received`` payload whose ``sentAt`` is the moment its batch was made; a client's
   delivery latency is its arrival time less that (same machine, same clock), and so includes
   the HTTP request. The hub answers a batch once it has written it to its connections, so
   the load window ends when the last batch is answered. Every push must reach every member
   exactly once (lost, duplicates and strays all 0).

``--server centrifuge`` measures the Centrifuge peer of ``bench/hub/peers.py`` in the hub's place
(``bench/hub/go_centrifuge``, built from Debian's Go packages; its figures keep the ``hub_`` names):
the same clients process speaking Centrifuge's JSON protocol, the same HS256 token (checked by
the peer, in its connect command), each connection subscribing to the channels its user's hub
connection joins (``user:{id}``, ``chat:{id}``), the same batches posted to the same path (the
peer publishes each push's hub record to the channel named by its group and answers every push
accepted) and the same check of every delivery. It has no database (nothing is looked up at
connect) and no per-address connection cap.

Each phase also reports the CPU of the clients, of this process and of the benchmark
database's PostgreSQL backends, how long the hub waited for a CPU (schedstat), and how busy the
whole machine was. For experiments: ``--hub-gc-stats`` (the hub's garbage collections, through a
``gc.callbacks`` hook: counts and pauses by phase), ``--hub-profile PATH`` (the hub under
cProfile) and ``--hub-env NAME=VALUE`` (a setting other than the defaults).

Prints one JSON object on stdout (inputs, machine, each run, medians over the runs); progress on
stderr; the hub's logs, the clients' spec and the deliveries stay in a temporary directory
(``logs`` in the output). ``--runs`` starts a fresh hub and clients process each run, on the
same database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID, uuid4

import asyncpg
import httpx
import orjson
import uvloop

from bench._common import DEFAULT_DSN, machine, module_command, parse_with_smoke, scratch_database
from bench.hub.fanout import SECRET, SERVICE_KEY, user_id
from bench.hub.peers import go_binary
from realtime_dispatch.delivery.push import BATCH_PATH, MAX_BATCH_PUSHES, Push
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.messenger.commands import create_chat
from realtime_dispatch.values.ids import new_id
from realtime_dispatch.values.json_types import JsonObject
from support.procs import cpu_seconds, free_port, rss_kib
from support.stats import percentiles

CLIENTS_MODULE = "bench.hub._capacity_clients"
CONNECTIONS_GAUGE = 'messenger_realtime_hub_connections{state="open"} '
KEEPALIVE_REUSE = 2.0
"""Seconds an idle keep-alive connection of the raw publisher is reused for (uvicorn closes one
idle for 5 s, its ``timeout_keep_alive``)."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the database -----------------------------------------------------------------------------


def spread(count: int, among: int) -> list[int]:
    """``count`` indices spread evenly over ``range(among)``."""
    return sorted({k * among // count for k in range(count)}) if count else []


async def seed(
    url: str, args: argparse.Namespace
) -> tuple[dict[UUID, list[int]], dict[UUID, list[int]]]:
    """The users' chats: the active chats and the quiet ones (chat id → member indices)."""
    n, size = args.clients, args.chat_size
    chats_wanted = max(1, round(n * args.active_fraction / size))
    active = spread(chats_wanted * size, n)
    conn = await asyncpg.connect(url)
    try:
        chats: dict[UUID, list[int]] = {}
        for c in range(chats_wanted):
            members = active[c * size : (c + 1) * size]
            chat = await create_chat(
                conn,
                creator=user_id(members[0]),
                title=f"active {c}",
                members=[user_id(i) for i in members[1:]],
            )
            chats[chat] = members
        taken = set(active)
        rest = [i for i in range(n) if i not in taken]
        quiet: list[tuple[UUID, list[int]]] = []
        if args.quiet_chat_size > 0:
            step = args.quiet_chat_size
            quiet = [(new_id(), rest[k : k + step]) for k in range(0, len(rest), step)]
            await conn.copy_records_to_table(
                "chats",
                schema_name="messenger",
                columns=("id", "title", "created_by"),
                records=[(c, "quiet", user_id(m[0])) for c, m in quiet],
            )
            await conn.copy_records_to_table(
                "participants",
                schema_name="messenger",
                columns=("id", "chat_id", "user_id"),
                records=[(new_id(), c, user_id(i)) for c, m in quiet for i in m],
            )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return chats, dict(quiet)


# --- measuring processes ----------------------------------------------------------------------


def cpu_of(pid: int) -> float:
    with contextlib.suppress(OSError):
        return cpu_seconds(pid)
    return 0.0


def backends_of(database: str) -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL backend connected to ``database`` (the hub's pool
    and its membership feed; backends of other databases on a shared server are left out)."""
    found: dict[int, float] = {}
    marker = f" {database} ".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            if marker not in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                continue
        except OSError:
            continue
        found[int(entry.name)] = cpu_of(int(entry.name))
    return found


def backends_cpu_since(database: str, before: dict[int, float]) -> float:
    """CPU of ``database``'s backends since ``before`` (a backend started since counts whole)."""
    now = backends_of(database)
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


def machine_ticks() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def runqueue_wait_s(pid: int) -> float:
    """Seconds the threads of ``pid`` have spent runnable but waiting for a CPU
    (``/proc/<pid>/task/*/schedstat``, second field): on a shared machine, how much of a
    latency is the hub waiting its turn rather than working."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


class Window:
    """CPU of the hub, the clients, the database's backends and this process over a window,
    how long the hub waited for a CPU, and how busy the whole machine was."""

    def __init__(self, hub: int, clients: int, database: str) -> None:
        self.pids = (hub, clients)
        self.database = database
        self.started_at = time.time()
        self.t0 = time.monotonic()
        self.wait0 = runqueue_wait_s(hub)
        self.hub0, self.clients0 = cpu_of(hub), cpu_of(clients)
        self.backends0 = backends_of(database)
        self.driver0 = time.process_time()
        self.ticks0 = machine_ticks()

    def close(self) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        busy, total = machine_ticks()
        elapsed = total - self.ticks0[1]
        return {
            "wall_s": wall,
            "span": (self.started_at, self.started_at + wall),
            "hub_cpu_s": cpu_of(self.pids[0]) - self.hub0,
            "hub_wait_s": runqueue_wait_s(self.pids[0]) - self.wait0,
            "clients_cpu_s": cpu_of(self.pids[1]) - self.clients0,
            "postgres_cpu_s": backends_cpu_since(self.database, self.backends0),
            "driver_cpu_s": time.process_time() - self.driver0,
            "machine_busy": (busy - self.ticks0[0]) / elapsed if elapsed else 0.0,
        }


def cores(window: dict[str, Any], key: str) -> float:
    return round(window[key] / window["wall_s"], 3) if window["wall_s"] else 0.0


async def connections_gauge(port: int) -> float | None:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    for line in text.splitlines():
        if line.startswith(CONNECTIONS_GAUGE):
            return float(line.split()[1])
    return None


# --- the hub ----------------------------------------------------------------------------------


def hub_command() -> list[str]:
    """``realtime-dispatch`` beside this interpreter (the console script), else the module."""
    script = Path(sys.executable).with_name("realtime-dispatch")
    if script.exists():
        return [str(script)]
    found = shutil.which("realtime-dispatch")
    return [found] if found else [sys.executable, "-m", "realtime_dispatch.cli.main"]


GC_BOOT = """
import atexit, gc, json, os, sys, time
counts, slow, started = {}, [], [0.0, 0.0]
def note(phase, info):
    if phase == "start":
        started[:] = [time.perf_counter(), time.time()]
        return
    took = time.perf_counter() - started[0]
    entry = counts.setdefault(str(info["generation"]), [0, 0.0, 0.0])
    entry[0] += 1
    entry[1] += took
    entry[2] = max(entry[2], took)
    if took >= 0.001:
        slow.append((started[1], info["generation"], took))
gc.callbacks.append(note)
path = os.environ["BENCH_GC_STATS"]
atexit.register(lambda: open(path, "w").write(json.dumps({"counts": counts, "slow": slow})))
from realtime_dispatch.cli.main import main
sys.exit(main())
"""
"""Runs the hub's own ``main`` with a :data:`gc.callbacks` hook that notes every collection
(``--hub-gc-stats``): the CLI's GC tuning and everything else unchanged."""


async def start_hub(
    url: str,
    port: int,
    log: Path,
    args: argparse.Namespace,
    *,
    profile: str | None,
    gc_stats: Path | None,
) -> asyncio.subprocess.Process:
    """The hub replica; under cProfile (written to ``profile`` at its exit), or with its
    garbage collections noted in ``gc_stats``, when asked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(
        REALTIME_DATABASE_URL=url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_LOG_LEVEL=args.hub_log_level,
        REALTIME_DATA_DIR=str(log.parent / "data"),  # the development media secrets
    )
    for setting in args.hub_env:  # an experiment's own settings, e.g. REALTIME_HUB_PING_INTERVAL
        name, _, value = setting.partition("=")
        env[name] = value
    command = hub_command()
    if gc_stats is not None:
        env["BENCH_GC_STATS"] = str(gc_stats)
        command = [sys.executable, "-c", GC_BOOT]
    if profile:
        command = [sys.executable, "-m", "cProfile", "-o", profile]
        command += ["-m", "realtime_dispatch.cli.main"]
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *command,
            "hub",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env=env,
            stdout=out,
            stderr=out,
        )


async def wait_ready(hub: asyncio.subprocess.Process, port: int) -> None:
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if hub.returncode is not None:
                raise RuntimeError(f"the hub exited with {hub.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError("the hub did not become ready")


async def stop_hub(hub: asyncio.subprocess.Process) -> int | None:
    if hub.returncode is None:
        hub.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(hub.wait(), 60)
        except TimeoutError:
            hub.kill()
            await hub.wait()
    return hub.returncode


def log_summary(log: Path) -> dict[str, Any]:
    """The hub's log lines: structured ones by level and event, uvicorn's plain ones (``INFO:
    ...``) by level, and the warnings and errors of either."""
    levels: Counter[str] = Counter()
    events: Counter[str] = Counter()
    plain: Counter[str] = Counter()
    problems: Counter[str] = Counter()
    for line in log.read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            level = line.split(b":", 1)[0].decode(errors="replace")
            plain[level if level.isupper() else "other"] += 1
            if level in {"WARNING", "ERROR", "CRITICAL"}:
                problems[line.decode(errors="replace")[:100]] += 1
            continue
        if not isinstance(record, dict):
            continue
        level = str(record.get("level", "?"))
        levels[level] += 1
        events[str(record.get("event"))] += 1
        if level in {"warning", "error", "critical"}:
            problems[f"{level}:{record.get('event')}"] += 1
    return {
        "structured_by_level": dict(levels),
        "structured_by_event": dict(events.most_common(8)),
        "plain_by_level": dict(plain),
        "warnings_and_errors": dict(problems.most_common(10)),
    }


# --- the clients process ----------------------------------------------------------------------


class Clients:
    """The clients process: its events read as they come, commands sent on stdin."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.total = 0
        self.closed_by_hub = 0
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, spec: Path) -> Clients:
        process = await asyncio.create_subprocess_exec(
            *module_command(CLIENTS_MODULE),
            str(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    def _future(self, name: str) -> asyncio.Future[dict[str, Any]]:
        if name not in self.events:
            self.events[name] = asyncio.get_running_loop().create_future()
        return self.events[name]

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            event = json.loads(line)
            if event["event"] == "progress":
                self.total = event["total"]
                self.closed_by_hub = event["closed_by_hub"]
            else:
                future = self._future(event["event"])
                if not future.done():
                    future.set_result(event)
        for future in self.events.values():
            if not future.done():
                future.set_exception(RuntimeError("the clients process ended"))

    async def wait(self, name: str, within: float) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self._future(name)), within)

    async def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"cmd": command}).encode() + b"\n")
        await self.process.stdin.drain()

    async def end(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        self.reader.cancel()


def source_address(index: int, per_address: int) -> str:
    """127.0.0.2 for the first ``per_address`` connections, 127.0.0.3 for the next, …"""
    host = 2 + index // per_address
    return f"127.{(host >> 16) & 255}.{(host >> 8) & 255}.{host & 255}"


# --- the load ---------------------------------------------------------------------------------


class RawBatchPublisher:
    """``POST /api/v1/hubs/messenger/batch`` with the body the worker's publisher sends, over
    keep-alive HTTP/1.1 connections written by hand: a few hundred µs of CPU a request where
    the worker's ``HttpHubPublisher`` (httpx) spends milliseconds, which on a 2-core machine
    would be taken from the hub being measured. Results: None, or what went wrong."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.head = (
            f"POST {BATCH_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {SERVICE_KEY}\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n"
        ).encode()

    async def publish(self, pushes: list[Push]) -> list[str | None]:
        body = b'{"pushes":[%s]}' % b",".join(
            b'{"group":%s,"target":"message_received","arguments":[%s]}'
            % (orjson.dumps(push.group), push.payload_json)
            for push in pushes
        )
        request = self.head % len(body) + body
        while self.idle:  # the most recently used first; one idle too long may be closed
            reader, writer, since = self.idle.pop()
            if time.monotonic() - since > KEEPALIVE_REUSE:
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, request, len(pushes))
            except (ConnectionError, asyncio.IncompleteReadError):
                # The hub closed it before reading the request (an idle keep-alive
                # connection): as any HTTP client, send it again on another connection.
                writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        return await self._exchange(reader, writer, request, len(pushes))

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: bytes,
        count: int,
    ) -> list[str | None]:
        writer.write(request)
        line = await reader.readline()
        if not line:
            raise ConnectionResetError("closed before answering")
        status = int(line.split()[1])
        length = 0
        while (line := await reader.readline()) not in {b"\r\n", b""}:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        answer = await reader.readexactly(length)
        self.idle.append((reader, writer, time.monotonic()))
        if status != 200:
            return [f"Http{status}"] * count
        return [
            None if item["status"] == 202 else str(item.get("code"))
            for item in orjson.loads(answer)["results"]
        ]

    async def aclose(self) -> None:
        for _, writer, _ in self.idle:
            writer.close()
        self.idle = []


class Pusher:
    """Pushes at a steady rate to the active chats: every ``tick`` the pushes that fell due since
    the last one go as one batch (one request), through the worker's ``HttpHubPublisher``
    (``--publisher worker``) or :class:`RawBatchPublisher` (``raw``)."""

    def __init__(self, port: int, chats: dict[UUID, list[int]], args: argparse.Namespace):
        self.port = port
        self.kind = args.publisher
        self.chats = list(chats.items())
        self.chat_ids = [str(chat) for chat, _ in self.chats]
        self.senders = [str(user_id(members[0])) for _, members in self.chats]
        self.push_rate = args.rate / args.chat_size
        self.seconds = args.seconds
        self.tick = args.tick
        self.sent: dict[str, list[int]] = {}  # message id → the members it is for
        self.failed: Counter[str] = Counter()
        self.requests = 0
        self.in_flight = self.max_in_flight = 0
        self.lag_s = 0.0  # how late a batch went out after it fell due, at worst

    def pushes(self, start: int, stop: int) -> Iterator[Push]:
        now = datetime.now(UTC).isoformat()
        for k in range(start, stop):
            chat, members = self.chats[k % len(self.chats)]
            message_id = str(uuid4())
            self.sent[message_id] = members
            payload: JsonObject = {
                "chatId": self.chat_ids[k % len(self.chats)],
                "messageId": message_id,
                "seq": k // len(self.chats) + 1,
                "senderUserId": self.senders[k % len(self.chats)],
                "kind": "text",
                "sentAt": now,
                "body": f"capacity benchmark message {k}",
            }
            yield Push(f"chat:{chat}", "message_received", payload)

    async def run(self) -> float:
        """Push for ``seconds``; returns the wall time until the last batch was answered."""
        publisher: HttpHubPublisher | RawBatchPublisher
        if self.kind == "worker":
            publisher = HttpHubPublisher(f"http://127.0.0.1:{self.port}", SERVICE_KEY, timeout=30)
        else:
            publisher = RawBatchPublisher(self.port)
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()

        async def send(items: list[Push]) -> None:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                results = await publisher.publish(items)
            except Exception as error:
                self.failed[type(error).__name__] += len(items)
                results = []
            finally:
                self.in_flight -= 1
                self.requests += 1
            for result in results:
                if result is not None:
                    self.failed[result if isinstance(result, str) else type(result).__name__] += 1

        total = round(self.push_rate * self.seconds)
        made = 0
        start = loop.time()
        try:
            while made < total:
                now = loop.time()
                due = min(total, int((now - start) * self.push_rate))
                if due > made:
                    stop = min(due, made + MAX_BATCH_PUSHES)
                    self.lag_s = max(self.lag_s, now - start - stop / self.push_rate)
                    task = asyncio.create_task(send(list(self.pushes(made, stop))))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    made = stop
                await asyncio.sleep(self.tick)
            while tasks:
                await asyncio.gather(*tasks)
        finally:
            await publisher.aclose()
        return loop.time() - start


def gc_summary(stats: dict[str, Any], spans: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """The hub's collections: per generation over its life (count, seconds, longest pause),
    and the pauses of 1 ms or more in each phase (count, seconds, longest, by generation)."""
    phases: dict[str, Any] = {}
    for name, (start, end) in spans.items():
        pauses = [(gen, took) for at, gen, took in stats["slow"] if start <= at < end]
        phases[name] = {
            "pauses_over_1ms": len(pauses),
            "paused_s": round(sum(took for _, took in pauses), 3),
            "longest_ms": round(max((took for _, took in pauses), default=0.0) * 1000, 1),
            "by_generation": dict(Counter(str(gen) for gen, _ in pauses)),
        }

    def phase_of(at: float) -> str:
        return next((n for n, (a, b) in spans.items() if a <= at < b), "between phases")

    longest = sorted(stats["slow"], key=lambda pause: -pause[2])[:5]
    return {
        "longest": [
            {"phase": phase_of(at), "generation": gen, "ms": round(took * 1000, 1)}
            for at, gen, took in longest
        ],
        "lifetime": {
            gen: {"collections": n, "seconds": round(total, 3), "longest_ms": round(most * 1000, 1)}
            for gen, (n, total, most) in sorted(stats["counts"].items())
        },
        "phases": phases,
    }


def judge(pusher: Pusher, rows: list[list[Any]]) -> dict[str, Any]:
    """Every push at every member exactly once: lost, duplicates and strays; the latencies."""
    got: dict[str, Counter[int]] = {}
    for client, message_id, *_ in rows:
        got.setdefault(message_id, Counter())[client] += 1
    lost = duplicates = strays = 0
    for message_id, members in pusher.sent.items():
        counts = got.pop(message_id, Counter())
        lost += sum(1 for m in members if counts[m] == 0)
        duplicates += sum(n - 1 for n in counts.values() if n > 1)
        strays += sum(n for c, n in counts.items() if c not in members)
    strays += sum(sum(c.values()) for c in got.values())  # pushes nobody made
    return {
        "expected": sum(len(m) for m in pusher.sent.values()),
        "received": len(rows),
        "lost": lost,
        "duplicates": duplicates,
        "strays": strays,
        "latency_ms": percentiles([row[2] for row in rows]),
    }


# --- one run ----------------------------------------------------------------------------------


def channels(chats: tuple[dict[UUID, list[int]], dict[UUID, list[int]]], n: int) -> list[list[str]]:
    """The ``centrifuge`` peer's clients' channels, by index: the groups a hub connection of the
    same user joins at connect (``user:{id}`` and ``chat:{id}`` of each of its chats)."""
    joined: list[list[str]] = [[f"user:{user_id(i)}"] for i in range(n)]
    for group in chats:
        for chat, members in group.items():
            for i in members:
                joined[i].append(f"chat:{chat}")
    return joined


def server_command(args: argparse.Namespace, port: int) -> list[str]:
    """The ``centrifuge`` peer (``bench/hub/go_centrifuge``, built from Debian's packages)."""
    binary = go_binary("go_centrifuge")
    return [str(binary), "-secret", SECRET, "-service-key", SERVICE_KEY, str(port)]


async def start_peer(args: argparse.Namespace, port: int, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *server_command(args, port), stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out
        )


async def one_run(
    args: argparse.Namespace,
    url: str,
    both: tuple[dict[UUID, list[int]], dict[UUID, list[int]]],
    logs: Path,
    run: int,
) -> dict[str, Any]:
    chats = both[0]
    database = urlsplit(url).path.lstrip("/")
    port = free_port()
    log = logs / f"hub-{run}.log"
    spec = logs / f"clients-{run}.json"
    out = logs / f"deliveries-{run}.json"
    peer = args.server == "centrifuge"
    path = "/connection/websocket" if peer else "/hubs/messenger"
    spec.write_text(
        json.dumps(
            {
                "url": f"ws://127.0.0.1:{port}{path}",
                "protocol": "centrifuge" if peer else "hub",
                "channels": channels(both, args.clients) if peer else None,
                "secret": SECRET,
                "users": [str(user_id(i)) for i in range(args.clients)],
                "addresses": [source_address(i, args.per_address) for i in range(args.clients)],
                "in_flight": args.in_flight,
                "ping_every": args.ping_every,
                "out": str(out),
            }
        )
    )
    profile = f"{args.hub_profile}.{run}" if args.hub_profile else None
    gc_stats = logs / f"gc-{run}.json" if args.hub_gc_stats else None
    if peer:
        hub = await start_peer(args, port, log)
    else:
        hub = await start_hub(url, port, log, args, profile=profile, gc_stats=gc_stats)
    spans: dict[str, tuple[float, float]] = {}
    clients: Clients | None = None
    result: dict[str, Any] = {"run": run}
    try:
        await wait_ready(hub, port)
        await asyncio.sleep(args.settle)
        rss_before = rss_kib(hub.pid)
        clients = await Clients.start(spec)
        await clients.wait("ready", 300)
        clients_rss_before = rss_kib(clients.process.pid)
        say(f"run {run}: connecting {args.clients} clients, {args.in_flight} in flight")

        window = Window(hub.pid, clients.process.pid, database)
        await clients.send("connect")
        connected = await clients.wait("connected", args.connect_timeout)
        phase = window.close()
        spans["connect"] = phase["span"]
        n = connected["clients"]
        result["connect"] = {
            "connected": n,
            "failures": connected["failures"],
            "errors": connected["errors"],
            "wall_s": round(connected["wall_s"], 2),
            "connections_per_s": round(n / connected["wall_s"], 1) if connected["wall_s"] else 0,
            "connect_ms": connected["connect_ms"],
            "hub_cpu_ms_per_connection": round(phase["hub_cpu_s"] / max(1, n) * 1000, 3),
            "postgres_cpu_ms_per_connection": round(phase["postgres_cpu_s"] / max(1, n) * 1000, 3),
            "hub_cores": cores(phase, "hub_cpu_s"),
            "hub_waiting_for_cpu": cores(phase, "hub_wait_s"),
            "clients_cores": cores(phase, "clients_cpu_s"),
            "machine_busy": round(phase["machine_busy"], 2),
        }
        say(f"run {run}: connect {result['connect']}")

        await asyncio.sleep(args.settle)
        rss_connected = rss_kib(hub.pid)
        window = Window(hub.pid, clients.process.pid, database)
        await asyncio.sleep(args.idle)
        idle = window.close()
        spans["idle"] = idle["span"]
        rss_idle = rss_kib(hub.pid)
        result["idle"] = {
            "hub_connections_gauge": await connections_gauge(port),
            "hub_rss_mib_before": round(rss_before / 1024, 1),
            "hub_rss_mib_connected": round(rss_connected / 1024, 1),
            "hub_rss_mib_after_idle": round(rss_idle / 1024, 1),
            "hub_kib_per_connection": round((rss_connected - rss_before) / max(1, n), 2),
            "clients_rss_mib": round(rss_kib(clients.process.pid) / 1024, 1),
            "clients_kib_per_connection": round(
                (rss_kib(clients.process.pid) - clients_rss_before) / max(1, n), 2
            ),
            "seconds": round(idle["wall_s"], 1),
            "hub_cores": cores(idle, "hub_cpu_s"),
            "hub_waiting_for_cpu": cores(idle, "hub_wait_s"),
            "hub_cpu_us_per_connection_per_s": round(
                idle["hub_cpu_s"] / idle["wall_s"] / max(1, n) * 1e6, 3
            ),
            "clients_cores": cores(idle, "clients_cpu_s"),
            "postgres_cores": cores(idle, "postgres_cpu_s"),
            "machine_busy": round(idle["machine_busy"], 2),
        }
        say(f"run {run}: idle {result['idle']}")

        pusher = Pusher(port, chats, args)
        say(f"run {run}: pushing {args.rate:,} deliveries/s for {args.seconds} s")
        window = Window(hub.pid, clients.process.pid, database)
        pushed_s = await pusher.run()
        load = window.close()
        spans["load"] = load["span"]
        rss_load = rss_kib(hub.pid)
        expected = sum(len(m) for m in pusher.sent.values())
        deadline = time.monotonic() + 30
        while clients.total < expected and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        closed_by_hub = clients.closed_by_hub
        await clients.send("stop")
        done = await clients.wait("done", 300)
        rows = orjson.loads(await asyncio.to_thread(out.read_bytes))
        verdict = judge(pusher, rows)
        delivered = verdict["received"]
        hub_us = load["hub_cpu_s"] / max(1, delivered) * 1e6
        idle_share = result["idle"]["hub_cores"] * load["wall_s"]
        result["load"] = {
            "pushes": len(pusher.sent),
            "push_failures": dict(pusher.failed),
            "requests": pusher.requests,
            "max_requests_in_flight": pusher.max_in_flight,
            "worst_batch_lag_ms": round(pusher.lag_s * 1000, 1),
            "seconds": round(pushed_s, 2),
            "deliveries_per_s": round(delivered / pushed_s),
            **verdict,
            "hub_cores": cores(load, "hub_cpu_s"),
            "hub_waiting_for_cpu": cores(load, "hub_wait_s"),
            "hub_cpu_us_per_delivery": round(hub_us, 2),
            "hub_cpu_us_per_delivery_above_idle": round(
                (load["hub_cpu_s"] - idle_share) / max(1, delivered) * 1e6, 2
            ),
            "clients_cores": cores(load, "clients_cpu_s"),
            "driver_cores": cores(load, "driver_cpu_s"),
            "postgres_cores": cores(load, "postgres_cpu_s"),
            "machine_busy": round(load["machine_busy"], 2),
            "hub_rss_mib_after": round(rss_load / 1024, 1),
        }
        result["clients_process"] = {
            k: done[k] for k in ("hub_pings", "client_pings", "other_records", "unexpected_frames")
        }
        result["closed_by_hub"] = max(closed_by_hub, done["closed_by_hub"])
        say(f"run {run}: load {result['load']}")
    finally:
        if clients is not None:
            await clients.end()
        result["hub_exit_code"] = await stop_hub(hub)
        result["hub_log"] = log_summary(log)
        result["spans"] = {name: [round(a, 3), round(b, 3)] for name, (a, b) in spans.items()}
        if gc_stats is not None and gc_stats.exists():
            result["hub_gc"] = gc_summary(orjson.loads(gc_stats.read_bytes()), spans)
    result["valid"] = (
        result["connect"]["failures"] == 0
        and result["closed_by_hub"] == 0
        and not result["load"]["push_failures"]
        and result["load"]["lost"] == 0
        and result["load"]["duplicates"] == 0
        and result["load"]["strays"] == 0
    )
    return result


MEDIANS = {
    "connections_per_s": ("connect", "connections_per_s"),
    "connect_hub_cpu_ms_per_connection": ("connect", "hub_cpu_ms_per_connection"),
    "connect_postgres_cpu_ms_per_connection": ("connect", "postgres_cpu_ms_per_connection"),
    "hub_kib_per_connection": ("idle", "hub_kib_per_connection"),
    "hub_rss_mib_connected": ("idle", "hub_rss_mib_connected"),
    "idle_hub_cores": ("idle", "hub_cores"),
    "deliveries_per_s": ("load", "deliveries_per_s"),
    "load_hub_cores": ("load", "hub_cores"),
    "hub_cpu_us_per_delivery": ("load", "hub_cpu_us_per_delivery"),
    "hub_cpu_us_per_delivery_above_idle": ("load", "hub_cpu_us_per_delivery_above_idle"),
    "clients_cores_under_load": ("load", "clients_cores"),
}


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, (phase, key) in MEDIANS.items():
        values = [r[phase][key] for r in runs]
        summary[name] = statistics.median(values)
    for q in ("p50", "p95", "p99", "max"):
        summary[f"latency_{q}_ms"] = statistics.median(r["load"]["latency_ms"][q] for r in runs)
    return summary


async def main(args: argparse.Namespace) -> dict[str, Any]:
    facts = machine()
    logs = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    say(f"logs in {logs}; nproc {facts['nproc']}, load average {facts['load_avg_at_start']}")
    async with scratch_database(args.dsn, "capacity") as url:
        chats, quiet = await seed(url, args)
        active = sum(len(m) for m in chats.values())
        say(f"seeded {len(chats)} active chats ({active} users), {len(quiet)} quiet chats")
        runs = [
            await one_run(args, url, (chats, quiet), logs, run) for run in range(1, args.runs + 1)
        ]
    return {
        "inputs": {
            **{k: v for k, v in vars(args).items() if k != "dsn"},
            "active_chats": len(chats),
            "active_users": active,
            "quiet_chats": len(quiet),
            "hub_command": server_command(args, 0)[:-1]
            if args.server == "centrifuge"
            else [
                *hub_command(),
                "hub",
            ],
        },
        "machine": {**facts, "load_avg_at_end": os.getloadavg()},
        "logs": str(logs),
        "valid": all(r["valid"] for r in runs),
        "median": medians(runs),
        "runs": runs,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--clients", type=int, default=15_000)
    parser.add_argument("--active-fraction", type=float, default=0.01)
    parser.add_argument("--chat-size", type=int, default=10, help="members of an active chat")
    parser.add_argument(
        "--quiet-chat-size", type=int, default=10, help="the other users' chats; 0: none"
    )
    parser.add_argument("--rate", type=int, default=10_000, help="deliveries per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="of load")
    parser.add_argument("--tick", type=float, default=0.01, help="seconds between batches")
    parser.add_argument(
        "--publisher",
        choices=["raw", "worker"],
        default="raw",
        help="how the pushes go: a minimal HTTP/1.1 client (raw) or the worker's HttpHubPublisher",
    )
    parser.add_argument("--idle", type=float, default=15.0, help="seconds of idle measured")
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--in-flight", type=int, default=200, help="connects at once")
    parser.add_argument("--per-address", type=int, default=1000, help="connections per source")
    parser.add_argument("--ping-every", type=float, default=15.0)
    parser.add_argument("--connect-timeout", type=float, default=900.0)
    parser.add_argument("--hub-log-level", default="info")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--server",
        choices=["hub", "centrifuge"],
        default="hub",
        help="the server measured: the hub, or the Centrifuge peer (bench/hub/go_centrifuge)",
    )
    parser.add_argument(
        "--hub-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra setting for the hub (repeatable), for experiments: not the defaults",
    )
    parser.add_argument(
        "--hub-gc-stats",
        action="store_true",
        help="note the hub's garbage collections (a gc.callbacks hook): counts, pauses by phase",
    )
    parser.add_argument(
        "--hub-profile",
        metavar="PATH",
        help="run the hub under cProfile, its stats to PATH.<run> (slows it: not for figures)",
    )
    # Three source addresses at the smoke size too, so that path is exercised.
    smoke = {"clients": 300, "per_address": 100, "rate": 500, "seconds": 2.0, "idle": 1.0,
             "settle": 0.5, "connect_timeout": 60.0}  # fmt: skip
    return parse_with_smoke(parser, smoke)


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(parse_args())), indent=2))
