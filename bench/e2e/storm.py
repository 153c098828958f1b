"""A reconnect storm, survived and measured: kill -9 the hub replica every client is on, while
owners write; restart it; every client reconnects and catches up. Once resuming from the sync
cursor (``GET /api/sync``), once with today's full resync, in the same run.

    python -m bench.e2e.storm [--clients 5000] [--rate 20] [--down 5] [--before 5] [--timeout 300]
                          [--processes 2] [--workers 1] [--rest-workers N] [--dsn DSN]
                          [--rest-env NAME=VALUE ...]

In a scratch database ``bench_storm_*`` (dropped at the end): ``--clients`` users, each a
member of 5 chats of 10. The real processes, logs at level info as shipped: a ``hub`` replica
(the clients' WebSockets: the one that is killed), a second ``hub`` process serving the REST
API and ``GET /api/sync`` (so their CPU is told apart), and a ``worker`` pushing to the first
over HTTP. With ``--workers N`` the first is ``hub --workers N`` (one replica on N cores: a
parent, N workers and their private redis-server, killed and measured as one), and the REST
process ``hub --workers N`` as well unless ``--rest-workers`` says otherwise (``serve --workers
N`` serves REST on each of its workers). The clients
live in ``--processes`` processes (``bench/e2e/_storm_clients.py``: picows
WebSockets, the SDK's dedupe, full-jitter reconnects). Owners (this process) send messages
with the real ``send_message`` command at ``--rate`` per second throughout.

For each mode (``sync``, then ``full``): ``--before`` seconds of traffic, ``kill -9`` of the
hub replica, ``--down`` seconds dead, restart on the same port; the time from the restarted
replica's ``/readyz`` to each client being live again (reconnected and caught up) — p50, p95,
max — and the CPU seconds of the REST process and of the new hub process from the kill until
the last client is live, and the REST answers by status. At the end, once the outbox has
drained: every message of a client's chats written while it was connected must have been
shown to it exactly once (lost and duplicates shown, both must be 0). Writes JSON to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import orjson

from bench._common import (
    DEFAULT_DSN,
    machine,
    module_command,
    parse_with_smoke,
    print_table,
    scratch_database,
    write_json,
)
from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.messenger.messages import send_message
from support.procs import Proc, cpu_seconds, free_port
from support.stats import percentile

SECRET = "bench-storm-secret-bench-storm-secret-0123"
SERVICE_KEY = "bench-storm-service-key"
CHAT_SIZE = 10
CHATS_PER_USER = 5


def env_for(url: str, logs: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(
        REALTIME_DATABASE_URL=url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_DATA_DIR=str(logs / "data"),
        REALTIME_DISPATCH_BACKOFF_CAP="5",
        **extra,
    )
    return env


async def seed(conn: asyncpg.Connection, users: int) -> dict[UUID, list[UUID]]:
    """User i is in chats i//10·…: chat c has users (10c + j) mod N, j < 10; N/2 chats."""
    people = [uuid4() for _ in range(users)]
    chats = users * CHATS_PER_USER // CHAT_SIZE
    rosters = {uuid4(): [people[(c * CHAT_SIZE + j) % users] for j in range(CHAT_SIZE)]
               for c in range(chats)}  # fmt: skip
    await conn.copy_records_to_table(
        "chats",
        schema_name="messenger",
        columns=["id", "title", "created_by"],
        records=[(chat, "storm", members[0]) for chat, members in rosters.items()],
    )
    await conn.copy_records_to_table(
        "participants",
        schema_name="messenger",
        columns=["id", "chat_id", "user_id"],
        records=[(uuid4(), chat, m) for chat, members in rosters.items() for m in members],
    )
    await conn.execute("ANALYZE")
    return rosters


class Owners:
    """Messages at ``rate`` per second into random chats, from a member, until stopped."""

    def __init__(self, url: str, rosters: dict[UUID, list[UUID]], rate: float) -> None:
        self.url, self.rosters, self.rate = url, list(rosters.items()), rate
        self.sent: list[tuple[UUID, UUID]] = []  # (chat, message)
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        import random

        pool = await asyncpg.create_pool(self.url, min_size=4, max_size=4)
        try:
            tick = 0.05
            per_tick = self.rate * tick
            owed = 0.0
            while not self._stop.is_set():
                started = time.monotonic()
                owed += per_tick
                batch = int(owed)
                owed -= batch

                async def one() -> None:
                    chat, members = random.choice(self.rosters)
                    try:
                        async with pool.acquire() as conn:
                            sent = await send_message(
                                conn, chat_id=chat, sender=members[0], body="storm"
                            )
                        self.sent.append((chat, sent.message_id))
                    except Exception:
                        self.failed += 1

                await asyncio.gather(*(one() for _ in range(batch)))
                await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))
        finally:
            await pool.close()


class ClientsProc:
    def __init__(self, process: asyncio.subprocess.Process, out: Path) -> None:
        self.process = process
        self.out = out
        self.live = 0
        self.connected = asyncio.Event()
        self.done = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            event = json.loads(line)
            if event["event"] == "connected":
                self.connected.set()
            elif event["event"] == "live":
                self.live = event["live"]
            elif event["event"] == "done":
                self.done.set()

    async def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()

    def end(self) -> None:
        """Kill the clients' process group if it is still there (every exit path)."""
        self.reader.cancel()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


class ClientsGroup:
    """The client processes as one: commands to all, live clients summed."""

    def __init__(self, parts: list[ClientsProc]) -> None:
        self.parts = parts

    async def connected(self) -> None:
        await asyncio.gather(*(part.connected.wait() for part in self.parts))

    async def done(self) -> None:
        await asyncio.gather(*(part.done.wait() for part in self.parts))

    @property
    def live(self) -> int:
        return sum(part.live for part in self.parts)

    def cpu(self) -> float:
        """CPU seconds of the client processes so far."""
        total = 0.0
        for part in self.parts:
            with contextlib.suppress(OSError):
                total += cpu_seconds(part.process.pid)
        return total

    @live.setter
    def live(self, value: int) -> None:
        for part in self.parts:
            part.live = value

    async def send(self, **command: Any) -> None:
        for part in self.parts:
            await part.send(**command)


def merge(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"clients": []}
    for key in ("rest_statuses", "rest_errors", "hub_refusals", "not_live"):
        total: Counter[str] = Counter()
        for output in outputs:
            total.update(output.get(key, {}))
        merged[key] = dict(total)
    latency: dict[str, list[list[float]]] = defaultdict(list)
    for output in outputs:
        merged["clients"] += output["clients"]
        for kind, samples in output.get("rest_latency", {}).items():
            latency[kind] += samples
    merged["rest_latency"] = dict(latency)
    return merged


def source_address(index: int, per_address: int) -> str:
    """127.0.0.2 for the first ``per_address`` clients, 127.0.0.3 for the next, … (the hub caps
    the connections of one address, ``REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT``)."""
    host = 2 + index // per_address
    if host > 254:
        raise SystemExit("--per-address is too small for --clients on 127.0.0.0/24")
    return f"127.0.0.{host}"


def spread(values: list[float]) -> dict[str, float]:
    """p50, p95 and max, rounded (empty: nothing)."""
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 0.5), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (shared: others' work shows here)."""
    return [round(x, 2) for x in os.getloadavg()]


async def storm(
    mode: str,
    *,
    hub: Proc,
    hub_port: int,
    rest: Proc,
    clients: ClientsGroup,
    n: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    await clients.send(cmd="mode", mode=mode)
    await asyncio.sleep(args.before)
    rest_cpu0 = rest.cpu()
    clients_cpu0 = clients.cpu()
    load_at_kill = load_average()
    await clients.send(cmd="mark")  # live from now on = caught up after this storm
    killed_at = time.time()
    await hub.kill()
    await asyncio.sleep(args.down)
    clients.live = 0
    await hub.start(ready=False)
    await hub.wait_ready(120)
    ready_at = time.time()
    deadline = time.monotonic() + args.timeout
    while clients.live < n and time.monotonic() < deadline:  # noqa: ASYNC110 - a counter
        await asyncio.sleep(0.2)
    all_live_at = time.time()
    result = {
        "mode": mode,
        "killed_at": killed_at,
        "ready_at": ready_at,
        "all_live_wall_s": round(all_live_at - ready_at, 2),
        "live": clients.live,
        "rest_cpu_s": round(rest.cpu() - rest_cpu0, 2),
        "hub_cpu_s": round(hub.cpu(), 2),  # the new process, from its start
        # The load generator is not the product: what it cost in the same window.
        "clients_cpu_s": round(clients.cpu() - clients_cpu0, 2),
        "load_at_kill": load_at_kill,
        "load_at_end": load_average(),
    }
    await asyncio.sleep(2)
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # SIGTERM ends the run as Ctrl-C does (asyncio.run cancels this task): through the finally
    # blocks that kill every process this run started.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    logs = Path(tempfile.mkdtemp(prefix="bench-storm-"))
    load_at_start = load_average()
    async with scratch_database(args.dsn, "storm") as url:
        conn = await asyncpg.connect(url)
        try:
            rosters = await seed(conn, args.clients)
        finally:
            await conn.close()
        users = sorted({m for members in rosters.values() for m in members}, key=str)
        hub_port, rest_port = free_port(), free_port()
        hub_args = ["hub", "--workers", str(args.workers)]
        hub = Proc(
            hub_args, env_for(url, logs), logs / "hub.log", port=hub_port, group=args.workers > 1
        )
        rest_env = env_for(url, logs, **dict(item.split("=", 1) for item in args.rest_env))
        rest_args = ["hub", "--workers", str(args.rest_workers)]
        rest = Proc(
            rest_args, rest_env, logs / "rest.log", port=rest_port, group=args.rest_workers > 1
        )
        worker = Proc(
            ["worker"],
            env_for(url, logs, REALTIME_HUB_URL=f"http://127.0.0.1:{hub_port}"),
            logs / "worker.log",
        )
        procs = [hub, rest, worker]
        parts: list[ClientsProc] = []
        owners = Owners(url, rosters, args.rate)
        spec_path, out = logs / "spec.json", logs / "clients-out.json"
        try:
            await hub.start(ready=False)
            await rest.start(ready=False)
            await hub.wait_ready(120)
            await rest.wait_ready(120)
            await worker.start(ready=False)
            spec = {
                "ws": f"ws://127.0.0.1:{hub_port}/hubs/messenger",
                "rest": f"http://127.0.0.1:{rest_port}",
            }
            tokens = [[str(u), mint_token(SECRET, u, ttl=7200)] for u in users]
            addresses = [source_address(i, args.per_address) for i in range(len(tokens))]
            for n in range(args.processes):
                spec_n = {
                    **spec,
                    "clients": tokens[n :: args.processes],
                    "addresses": addresses[n :: args.processes],
                    "out": f"{out}.{n}",
                }
                path_n = Path(f"{spec_path}.{n}")
                await asyncio.to_thread(path_n.write_text, json.dumps(spec_n))
                process = await asyncio.create_subprocess_exec(
                    *module_command("bench.e2e._storm_clients"),
                    str(path_n),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    start_new_session=True,  # a group of its own: killed whole on any exit
                )
                parts.append(ClientsProc(process, Path(f"{out}.{n}")))
            clients = ClientsGroup(parts)
            connect_started = time.monotonic()
            await asyncio.wait_for(clients.connected(), args.timeout)
            connect_s = time.monotonic() - connect_started
            print(f"{len(users)} clients connected in {connect_s:.1f} s", flush=True)
            owners.start()
            storms = []
            for mode in args.modes:
                storms.append(
                    await storm(
                        mode,
                        hub=hub,
                        hub_port=hub_port,
                        rest=rest,
                        clients=clients,
                        n=len(users),
                        args=args,
                    )
                )
                print(storms[-1], flush=True)
            await owners.stop()
            # Let the dispatcher push the backlog, then stop the clients.
            check = await asyncpg.connect(url)
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    pending = await check.fetchval(
                        "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
                    )
                    if pending == 0:
                        break
                    await asyncio.sleep(0.5)
            finally:
                await check.close()
            await asyncio.sleep(3)
            clients_cpu = sum(cpu_seconds(part.process.pid) for part in parts)
            await clients.send(cmd="stop")
            await asyncio.wait_for(clients.done(), 120)
            for part in parts:
                await part.process.wait()
        finally:
            await owners.stop()
            for part in parts:
                part.end()
            for proc in procs:
                await proc.kill(signal.SIGTERM)
        data = merge([orjson.loads(part.out.read_bytes()) for part in parts])
    data["clients_cpu_s"] = clients_cpu
    data["load_at_start"] = load_at_start
    return analyse(
        args,
        rosters=rosters,
        owners=owners,
        storms=storms,
        data=data,
        connect_s=connect_s,
        logs=logs,
    )


def analyse(
    args: argparse.Namespace,
    *,
    rosters: dict[UUID, list[UUID]],
    owners: Owners,
    storms: list[dict[str, Any]],
    data: dict[str, Any],
    connect_s: float,
    logs: Path,
) -> dict[str, Any]:
    chats_of: dict[str, list[str]] = defaultdict(list)
    for chat, members in rosters.items():
        for member in members:
            chats_of[str(member)].append(str(chat))
    written: dict[str, list[str]] = defaultdict(list)
    for chat, message in owners.sent:
        written[str(chat)].append(str(message))
    lost = duplicates_shown = dropped = 0
    for client in data["clients"]:
        shown = client["shown"]
        expected = {m for chat in chats_of[client["user"]] for m in written[chat]}
        lost += len(expected - shown.keys())
        duplicates_shown += sum(count - 1 for count in shown.values() if count > 1)
        dropped += client["dropped"]
    for entry in storms:
        waits, requests, handshaken, catching = [], [], [], []
        attempted, connecting, attempts = [], [], []
        for client in data["clients"]:
            for catchup in client["catchups"]:
                if catchup["mode"] == entry["mode"] and catchup["down_at"] >= entry["killed_at"]:
                    waits.append(catchup["live_at"] - entry["ready_at"])
                    requests.append(catchup["requests"])
                    handshaken.append(catchup["connected_at"] - entry["ready_at"])
                    catching.append(catchup["live_at"] - catchup["connected_at"])
                    if "attempt_at" in catchup:
                        attempted.append(catchup["attempt_at"] - entry["ready_at"])
                        connecting.append(catchup["connected_at"] - catchup["attempt_at"])
                        attempts.append(catchup["attempts"])
        entry["caught_up"] = len(waits)
        if waits:
            entry |= {
                "p50_s": round(percentile(waits, 0.5), 2),
                "p95_s": round(percentile(waits, 0.95), 2),
                "max_s": round(max(waits), 2),
                "rest_requests": sum(requests),
                "requests_per_client": round(statistics.mean(requests), 2),
            }
        # Where the time goes: the attempt that got through begun (after the client's backoff
        # waits: positive, the client was still waiting at /readyz), its connect and
        # handshake (the parent's queue, the hub's admission), the handshake done, the
        # catch-up itself (REST), and each REST request's latency in the window.
        window = (entry["ready_at"], entry["ready_at"] + entry["all_live_wall_s"] + 1)
        entry["attempt_after_ready_s"] = spread(attempted)
        entry["connect_and_handshake_s"] = spread(connecting)
        entry["attempts"] = spread([float(n) for n in attempts])
        entry["handshake_after_ready_s"] = spread(handshaken)
        entry["catch_up_s"] = spread(catching)
        entry["rest_latency_s"] = {
            kind: spread([s for at, s in samples if window[0] <= at <= window[1]])
            for kind, samples in data["rest_latency"].items()
        }
    statuses = Counter({int(k): v for k, v in data["rest_statuses"].items()})
    return {
        "args": vars(args),
        "machine": machine(),
        "connect_s": round(connect_s, 1),
        "messages_written": len(owners.sent),
        "owner_failures": owners.failed,
        "lost": lost,
        "duplicates_shown": duplicates_shown,
        "duplicates_dropped": dropped,
        "rest_statuses": dict(statuses),
        "rest_5xx": sum(v for k, v in statuses.items() if k >= 500),
        "rest_errors": data["rest_errors"],
        "hub_refusals": data["hub_refusals"],
        "not_live_at_stop": data["not_live"],
        "clients_process_cpu_s": round(data["clients_cpu_s"], 1),
        "load_at_start": data["load_at_start"],
        "load_at_end": load_average(),
        "storms": storms,
        "logs": str(logs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second")
    parser.add_argument("--down", type=float, default=5.0, help="seconds the replica is dead")
    parser.add_argument("--before", type=float, default=5.0, help="seconds of traffic first")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the clients' hub replica's workers (hub --workers N; >1: its own redis-server)",
    )
    parser.add_argument(
        "--rest-workers",
        type=int,
        default=None,
        help="the REST process's workers (hub --workers N); default: --workers, as serve "
        "--workers N serves REST on every worker",
    )
    parser.add_argument("--per-address", type=int, default=500, help="clients per source address")
    parser.add_argument(
        "--modes",
        type=lambda text: [m for m in text.split(",") if m],
        default=["sync", "full"],
        help="the storms to run, in order: sync (resume from the cursor), full (full resync)",
    )
    parser.add_argument(
        "--rest-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the REST process (sync's bounds, say) other than its default",
    )
    smoke = {"clients": 100, "per_address": 40, "before": 1.0, "down": 1.0, "timeout": 60.0}
    args = parse_with_smoke(parser, smoke)
    if not args.modes or set(args.modes) - {"sync", "full"}:
        parser.error("--modes: sync, full or both, comma-separated")
    if args.rest_workers is None:
        args.rest_workers = args.workers
    result = asyncio.run(run(args))
    columns = ["mode", "p50_s", "p95_s", "max_s", "caught_up", "rest_requests", "rest_cpu_s",
               "hub_cpu_s"]  # fmt: skip
    print_table(columns, [[s.get(c, "") for c in columns] for s in result["storms"]])
    keys = ("messages_written", "lost", "duplicates_shown", "duplicates_dropped", "rest_5xx",
            "rest_statuses", "clients_process_cpu_s", "hub_refusals", "not_live_at_stop",
            "load_at_start", "load_at_end")  # fmt: skip
    summary = {k: result[k] for k in keys}
    print(json.dumps(summary))
    for s in result["storms"]:
        where = ("attempt_after_ready_s", "connect_and_handshake_s", "attempts",
                 "handshake_after_ready_s", "catch_up_s", "rest_latency_s", "clients_cpu_s",
                 "load_at_kill", "load_at_end")  # fmt: skip
        print(s["mode"], json.dumps({k: s.get(k) for k in where}))
    print(write_json("storm", result))
    everyone = all(s["live"] == s.get("caught_up") == args.clients for s in result["storms"])
    clean = result["lost"] == result["duplicates_shown"] == result["rest_5xx"] == 0
    sys.exit(0 if everyone and clean else 1)


if __name__ == "__main__":
    main()
