"""End-to-end benchmark: owner commit → WebSocket client receive, through the real processes.

    python -m bench.e2e.scenarios --scenario A|B|C|D|smoke [--seconds S] [--runs N] [--dsn DSN]
                        [--redis-url URL]

Each run, in a fresh scratch database ``bench_e2e_*`` (migrated, dropped at the end):

1. Seeds the scenario's chats and members (COPY).
2. Starts the real processes with ``REALTIME_*`` settings: ``realtime-dispatch serve`` (hub, REST
   and dispatcher in one process), or for scenario D two ``realtime-dispatch hub`` replicas with
   the Redis backplane and a separate ``realtime-dispatch worker``. Their logs (level info, as
   shipped) go to files.
3. Connects one WebSocket client per chat member in a separate process (``bench/e2e/_clients.py``,
   JSON hub protocol); in D a chat's members alternate between the two replicas.
4. Drives owners: the real ``send_message`` command from child processes at a fixed total commit
   rate (``bench/dispatch/lag.py``'s owners; each notes ``time.time()`` after COMMIT), or for
   scenario C a burst of 20,000 messages committed in one transaction.
5. Waits until every committed message reached every member (or nothing arrives for 15 s), and
   matches deliveries to commits by message id: latency = client receive time − commit time.

Prints p50/p95/p99/max, deliveries/s, lost deliveries, CPU and RSS of each process and the
backlog (Pending outbox rows, sampled twice a second); writes JSON to ``bench/results/`` and,
if matplotlib is installed (``pip install -e '.[bench]'``), a PNG beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import orjson

from bench._common import (
    DEFAULT_DSN,
    RESULTS,
    CpuMeter,
    cpu_pressure_us,
    machine,
    module_command,
    parse_with_smoke,
    postgres_pids,
    print_table,
    private_redis,
    scratch_database,
    seed_backlog,
    seed_chats,
    server_facts,
    settle,
    write_json,
)
from bench.dispatch.lag import run_owners
from realtime_dispatch.auth.tokens import mint_token
from support.procs import COMMAND, Proc, cli_env, cpu_seconds, free_port, rss_mib
from support.stats import percentile

HERE = Path(__file__).resolve().parent
# The same command with uvloop installed first (``--uvloop``); the CLI itself runs on uvloop now,
# so this only matters for comparing against older revisions.
UVLOOP_COMMAND = [
    sys.executable,
    "-c",
    "import sys, uvloop; uvloop.install();"
    " from realtime_dispatch.cli.main import main; sys.exit(main())",
]
SECRET = "bench-e2e-secret-bench-e2e-secret-0123456789"
SERVICE_KEY = "bench-e2e-service-key"
WARMUP = 1.0  # seconds of commits at the start of a run not counted in the percentiles
QUIET = 15.0  # give up waiting for deliveries after this long without progress


@dataclass(frozen=True)
class Scenario:
    chats: int
    members: int
    rate: float = 0.0  # owner commits/s in total (0: burst)
    seconds: float = 20.0
    burst: int = 0
    replicas: int = 0  # 0: one ``serve``; n: n ``hub`` processes + Redis + a ``worker``


SCENARIOS = {
    "A": Scenario(chats=100, members=10, rate=1000),
    "B": Scenario(chats=1, members=100, rate=200),
    "C": Scenario(chats=100, members=10, burst=20_000),
    "D": Scenario(chats=100, members=10, rate=1000, replicas=2),
    "smoke": Scenario(chats=4, members=5, rate=50, seconds=3),
}


# --- processes ----------------------------------------------------------------------------------


async def start(
    name: str, args: Sequence[str], env: dict[str, str], logs: Path, *, uvloop: bool = False
) -> Proc:
    proc = Proc(args, env, logs / f"{name}.log", command=UVLOOP_COMMAND if uvloop else COMMAND)
    await proc.start(ready=False)
    return proc


@contextlib.asynccontextmanager
async def servers(
    url: str, scenario: Scenario, args: argparse.Namespace, logs: Path
) -> AsyncIterator[list[Proc]]:
    """The server side: [serve] or [hub-1, …, hub-n, worker]."""
    env = cli_env(
        REALTIME_DATABASE_URL=url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_DATA_DIR=str(logs / "data"),
        # Every client of the benchmark connects from this one address.
        REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT="0",
    )
    env.update(dict(item.split("=", 1) for item in args.server_env))
    procs: list[Proc] = []
    try:
        if scenario.replicas:
            env.update(REALTIME_BACKPLANE_ENABLED="true", REALTIME_REDIS_URL=args.redis_url)
            for n in range(scenario.replicas):
                port = free_port()
                hub = await start(
                    f"hub-{n + 1}", ["hub", "--port", str(port)], env, logs, uvloop=args.uvloop
                )
                hub.port = port
                procs.append(hub)
            for hub in procs:
                await hub.wait_ready()
            procs.append(await start("worker", ["worker"], env, logs, uvloop=args.uvloop))
        else:
            port = free_port()
            serve = await start(
                "serve", ["serve", "--port", str(port)], env, logs, uvloop=args.uvloop
            )
            serve.port = port
            procs.append(serve)
            await serve.wait_ready()
        yield procs
    finally:
        for proc in procs:
            if proc.process.returncode is None:
                proc.process.terminate()
        for proc in procs:
            try:
                await asyncio.wait_for(proc.process.wait(), 20)
            except TimeoutError:
                proc.process.kill()
                await proc.process.wait()


# --- clients ------------------------------------------------------------------------------------


@dataclass
class Clients:
    proc: Proc
    out: Path
    total: int = 0
    last_progress: float = field(default_factory=time.monotonic)
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.proc.process.stdout is not None
        while line := await self.proc.process.stdout.readline():
            event = json.loads(line)
            if event["event"] == "progress":
                if event["total"] != self.total:
                    self.last_progress = time.monotonic()
                self.total = event["total"]

    async def wait_for(self, expected: int) -> None:
        self.last_progress = time.monotonic()
        while self.total < expected and time.monotonic() - self.last_progress < QUIET:
            if self.proc.process.returncode is not None:
                raise RuntimeError("the clients process exited")
            await asyncio.sleep(0.05)

    async def stop(self) -> list[tuple[str, float]]:
        process = self.proc.process
        assert process.stdin is not None
        process.stdin.write(b"stop\n")
        await process.stdin.drain()
        await asyncio.wait_for(process.wait(), 60)
        if self.reader is not None:
            await self.reader
        return [(m, t) for m, t in orjson.loads(self.out.read_bytes())]


async def connect_clients(hubs: list[Proc], rosters: dict[UUID, list[UUID]], tmp: Path) -> Clients:
    clients = []
    for users in rosters.values():
        for j, user in enumerate(users):
            hub = hubs[j % len(hubs)]
            clients.append([f"ws://127.0.0.1:{hub.port}/hubs/messenger", mint_token(SECRET, user)])
    spec = tmp / "clients.json"
    out = tmp / "deliveries.json"
    spec.write_text(json.dumps({"clients": clients, "out": str(out)}))
    process = await asyncio.create_subprocess_exec(
        *module_command("bench.e2e._clients"),
        str(spec),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 300)
    event = json.loads(line) if line else {"event": "exited"}
    if event["event"] != "connected":
        raise RuntimeError(f"clients did not connect: {event}")
    result = Clients(Proc.adopt("clients", process), out)
    result.reader = asyncio.create_task(result.read())
    return result


# --- sampling -----------------------------------------------------------------------------------


def owner_pids() -> list[int]:
    """This process's owner children (``bench/dispatch/lag.py --owner-process``)."""
    me = str(os.getpid())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            if ppid == me and b"--owner-process" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return pids


class Sampler:
    """Twice a second: the backlog (Pending outbox rows), the CPU and RSS of every process."""

    def __init__(self, url: str, procs: list[Proc]) -> None:
        self.url = url
        self.procs = procs
        self.owners: dict[int, tuple[float, float]] = {}  # pid → (cpu s, max RSS MiB)
        self.backlog: list[tuple[float, int]] = []
        # PostgreSQL processes: pid → (CPU s when first seen, last CPU s); a backend that
        # starts during the run (an owner's connection) counts from 0.
        self.postgres: dict[int, tuple[float, float]] = {}
        self._started = False
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            while True:
                pending = await conn.fetchval(
                    "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending'"
                )
                self.backlog.append((time.time(), int(pending)))
                for proc in self.procs:
                    proc.sample()
                self.sample_postgres()
                for pid in owner_pids():
                    with contextlib.suppress(OSError, ValueError):
                        rss = max(self.owners.get(pid, (0.0, 0.0))[1], rss_mib(pid))
                        self.owners[pid] = (cpu_seconds(pid), rss)
                await asyncio.sleep(0.5)
        finally:
            await conn.close()

    def sample_postgres(self) -> None:
        for pid in postgres_pids():
            with contextlib.suppress(OSError, ValueError):
                cpu = cpu_seconds(pid)
                first = self.postgres.get(pid, (cpu if not self._started else 0.0, 0.0))[0]
                self.postgres[pid] = (first, cpu)
        self._started = True

    @property
    def postgres_cpu(self) -> float:
        return sum(last - first for first, last in self.postgres.values())

    def start(self) -> None:
        self.sample_postgres()
        for proc in self.procs:
            proc.sample()
            proc.cpu0 = proc.cpu_last
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        self.sample_postgres()
        for proc in self.procs:
            proc.sample()
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def dispatcher_metrics(serve: Proc) -> dict[str, float]:
    """Passes run and rows dispatched, from ``serve``'s ``/metrics`` (sums over labels)."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{serve.port}/metrics")).text
    wanted = {
        "messenger_realtime_passes_total": "passes",
        "messenger_realtime_dispatched_total": "dispatched",
    }
    found: dict[str, float] = {}
    for metric_line in text.splitlines():
        name = metric_line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            key = wanted[name]
            found[key] = found.get(key, 0.0) + float(metric_line.rsplit(" ", 1)[1])
    return found


# --- owners -------------------------------------------------------------------------------------


async def burst(url: str, rosters: dict[UUID, list[UUID]], rows: int) -> list[tuple[str, float]]:
    """``rows`` messages with their outbox rows committed in one transaction (COPY)."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await seed_backlog(conn, list(rosters), rows)
        committed = time.time()
        ids = await conn.fetch("SELECT message_id FROM messenger.realtime_outbox")
    finally:
        await conn.close()
    return [(str(r["message_id"]), committed) for r in ids]


# --- one run ------------------------------------------------------------------------------------


async def one_run(dsn: str, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    async with scratch_database(dsn, "e2e") as url:
        conn = await asyncpg.connect(url)
        try:
            rosters = await seed_chats(conn, scenario.chats, scenario.members)
            await settle(conn)
        finally:
            await conn.close()
        with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmpdir:
            tmp = Path(args.logs or tmpdir)
            os.makedirs(tmp, exist_ok=True)
            async with servers(url, scenario, args, tmp) as procs:
                hubs = [p for p in procs if p.port is not None]
                clients = await connect_clients(hubs, rosters, tmp)
                try:
                    await asyncio.sleep(1.0)  # connections settled, groups joined
                    every = [*procs, clients.proc]
                    sampler = Sampler(url, every)
                    meter = CpuMeter()
                    meter.start()
                    pressure0 = cpu_pressure_us()
                    sampler.start()
                    t0 = time.time()
                    if scenario.burst:
                        commits = await burst(url, rosters, scenario.burst)
                    else:
                        rows = await run_owners(
                            url,
                            rosters,
                            owners=min(8, scenario.chats),
                            processes=min(2, scenario.chats),
                            rate=scenario.rate,
                            seconds=args.seconds or scenario.seconds,
                            command="send_message",
                        )
                        commits = [(m, ts) for _, m, ts in rows]
                    expected = len(commits) * scenario.members
                    await clients.wait_for(expected)
                    await sampler.stop()
                    meter.stop()
                    pressure1 = cpu_pressure_us()
                    wall = time.time() - t0
                    dispatcher = await dispatcher_metrics(hubs[0]) if not scenario.replicas else {}
                finally:
                    deliveries = await clients.stop()
            logs = {
                p.name: (tmp / f"{p.name}.log").read_text(errors="replace")[-2000:] for p in procs
            }
    result = analyse(commits, deliveries, scenario, t0=t0)
    result["backlog"] = [(round(t - t0, 2), n) for t, n in sampler.backlog]
    result["backlog_max"] = max((n for _, n in sampler.backlog), default=0)
    result["backlog_last_5"] = [n for _, n in sampler.backlog[-5:]]
    processes = {p.name: {"cpu": (p.cpu_last - p.cpu0) / wall, "rss_mib": p.rss_max} for p in every}
    processes["owners"] = {
        "cpu": sum(cpu for cpu, _ in sampler.owners.values()) / wall,
        "rss_mib": sum(rss for _, rss in sampler.owners.values()),
        "processes": len(sampler.owners),
    }
    processes["postgresql (all backends)"] = {"cpu": sampler.postgres_cpu / wall, "rss_mib": None}
    processes["driver"] = {"cpu": meter.client / wall, "rss_mib": rss_mib(os.getpid())}
    result["processes"] = processes
    result["machine_busy"] = meter.machine_busy
    # CPU used by everything else on the machine (other sessions), in cores.
    ours = sum(p["cpu"] for p in processes.values())
    result["other_cpu"] = max(0.0, meter.machine_busy * (os.cpu_count() or 1) - ours)
    if pressure0 is not None and pressure1 is not None:
        # Share of the time in which at least one runnable task waited for a CPU.
        result["cpu_pressure"] = (pressure1 - pressure0) / 1e6 / wall
    result["dispatcher_metrics"] = dispatcher
    if dispatcher.get("passes"):
        result["rows_per_pass"] = dispatcher["dispatched"] / dispatcher["passes"]
    result["wall_s"] = wall
    if result["lost"]:
        result["server_log_tail"] = logs
    return result


def analyse(
    commits: list[tuple[str, float]],
    deliveries: list[tuple[str, float]],
    scenario: Scenario,
    *,
    t0: float,
) -> dict[str, Any]:
    received: dict[str, list[float]] = defaultdict(list)
    for message_id, at in deliveries:
        received[message_id].append(at)
    committed = dict(commits)
    first = min(committed.values())
    counted_from = first if scenario.burst else first + WARMUP
    lags: list[float] = []
    series: list[tuple[float, float]] = []  # (commit time − t0, latency ms)
    lost = duplicates = 0
    last_delivery = first
    for message_id, ts in committed.items():
        times = received.get(message_id, [])
        lost += max(0, scenario.members - len(times))
        duplicates += max(0, len(times) - scenario.members)
        for at in times:
            last_delivery = max(last_delivery, at)
            ms = (at - ts) * 1000
            series.append((ts - t0, ms))
            if ts >= counted_from:
                lags.append(ms)
    stray = sum(1 for m in received if m not in committed)
    lags.sort()
    counted = [ts for ts in committed.values() if ts >= counted_from]
    window = (max(counted) - min(counted)) if len(counted) > 1 else 0.0
    result: dict[str, Any] = {
        "commits": len(commits),
        "expected_deliveries": len(commits) * scenario.members,
        "deliveries": len(deliveries),
        "lost": lost,
        "duplicates": duplicates,
        "stray": stray,
        "p50_ms": percentile(lags, 0.50),
        "p95_ms": percentile(lags, 0.95),
        "p99_ms": percentile(lags, 0.99),
        "max_ms": lags[-1],
        "min_ms": lags[0],
        "mean_ms": statistics.fmean(lags),
        "series": series,
    }
    if scenario.burst:
        drain = last_delivery - first
        result["drain_s"] = drain
        result["deliveries_per_s"] = len(deliveries) / drain if drain > 0 else 0.0
        result["commit_rate"] = 0.0
    else:
        result["commit_rate"] = len(counted) / window if window > 0 else 0.0
        result["deliveries_per_s"] = result["commit_rate"] * scenario.members
    return result


# --- output -------------------------------------------------------------------------------------


def plot(name: str, run: dict[str, Any], title: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = run["series"]
    lags = sorted(ms for _, ms in series)
    fig, (hist, over) = plt.subplots(1, 2, figsize=(13, 4.5))
    low = max(0.1, lags[0])
    bins = [low * (lags[-1] / low) ** (i / 80) for i in range(81)] if lags[-1] > low else 20
    hist.hist(lags, bins=bins, color="#4477aa")
    hist.set_xscale("log")
    hist.set_xlabel("commit → client receive (ms, log scale)")
    hist.set_ylabel("deliveries")
    for q, style in ((0.5, "-"), (0.95, "--"), (0.99, ":")):
        value = percentile(lags, q)
        hist.axvline(
            value, color="black", linestyle=style, label=f"p{round(q * 100)} {value:.1f} ms"
        )
    hist.legend()
    hist.set_title("latency distribution (every delivery, warm-up included)")
    buckets: dict[int, list[float]] = defaultdict(list)
    for at, ms in series:
        buckets[int(at * 4)].append(ms)
    xs = sorted(buckets)
    for q, label in ((0.5, "p50"), (0.99, "p99"), (1.0, "max")):
        ys = [percentile(sorted(buckets[x]), q) for x in xs]
        over.plot([x / 4 for x in xs], ys, label=label)
    over.set_yscale("log")
    over.set_xlabel("commit time (s since start), 250 ms buckets")
    over.set_ylabel("latency (ms, log scale)")
    backlog = over.twinx()
    backlog.plot(*zip(*run["backlog"], strict=True), color="grey", alpha=0.5, label="backlog")
    backlog.set_ylabel("Pending outbox rows")
    over.legend(loc="upper left")
    backlog.legend(loc="upper right")
    over.set_title("latency and backlog over time")
    fig.suptitle(title)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def line(r: dict[str, Any]) -> str:
    rate = f"drain {r['drain_s']:.2f} s" if "drain_s" in r else f"{r['commit_rate']:,.0f} commits/s"
    return (
        f"{rate}, {r['deliveries_per_s']:,.0f} deliveries/s, p50 {r['p50_ms']:.1f}"
        f" p95 {r['p95_ms']:.1f} p99 {r['p99_ms']:.1f} max {r['max_ms']:.1f} ms,"
        f" {r['lost']} lost, {r.get('rows_per_pass', 0):.1f} rows/pass,"
        f" backlog max {r['backlog_max']}, machine busy {r['machine_busy']:.0%}"
        f" (others {r['other_cpu']:.2f} cores), CPU pressure {r.get('cpu_pressure', 0):.0%}"
    )


async def main(args: argparse.Namespace) -> int:
    scenario = SCENARIOS[args.scenario]
    if args.rate is not None:
        scenario = dataclasses.replace(scenario, rate=args.rate)
    facts = {**machine(), **await server_facts(args.dsn)}
    print(f"machine: {facts}", flush=True)
    runs = []
    with contextlib.ExitStack() as stack:
        if scenario.replicas and not args.redis_url:
            args.redis_url, _ = stack.enter_context(private_redis())
        for n in range(args.runs):
            runs.append(await one_run(args.dsn, scenario, args))
            print(f"  run {n + 1}: {line(runs[-1])}", flush=True)
    keys = ["commit_rate", "deliveries_per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "lost"]
    keys += ["machine_busy", "other_cpu", "cpu_pressure"]
    if scenario.burst:
        keys.insert(0, "drain_s")
    summary = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
    print()
    print(f"scenario {args.scenario}: {scenario}, medians of {len(runs)} run(s)")
    print_table(keys, [[summary[k] for k in keys]])
    print()
    names = list(runs[0]["processes"])
    print_table(
        ["process", "CPU (cores)", "max RSS MiB"],
        [
            [
                name,
                statistics.median(r["processes"][name]["cpu"] for r in runs),
                runs[-1]["processes"][name]["rss_mib"] or "-",
            ]
            for name in names
        ],
    )
    print(f"backlog (Pending rows), last run, every 0.5 s: {[n for _, n in runs[-1]['backlog']]}")
    # The plot shows the run whose p95 is the median.
    shown = sorted(runs, key=lambda r: r["p95_ms"])[len(runs) // 2]
    data = {
        "benchmark": "e2e",
        "scenario": args.scenario,
        "parameters": vars(scenario),
        "args": vars(args),
        "machine": {**facts, "load_avg_at_end": os.getloadavg()},
        "summary": summary,
        "runs": [{k: v for k, v in r.items() if k != "series"} for r in runs],
    }
    path = write_json(f"e2e-{args.scenario}", data)
    print(f"wrote {path}")
    title = f"scenario {args.scenario}: {scenario.chats} chats × {scenario.members} members, " + (
        f"burst {scenario.burst:,}" if scenario.burst else f"{scenario.rate:,.0f} msgs/s"
    )
    png = plot(path.stem, shown, title)
    print(f"wrote {png}" if png else "plot skipped: matplotlib is not installed ('.[bench]')")
    return 1 if any(r["lost"] for r in runs) else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="A")
    parser.add_argument("--seconds", type=float, default=None, help="owner load per run")
    parser.add_argument(
        "--rate", type=float, default=None, help="owner commits/s instead of the scenario's"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REALTIME_REDIS_URL"),
        help="Redis for scenario D's backplane (default: a redis-server of its own)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the server processes, e.g. REALTIME_DISPATCH_BATCH_SIZE=500",
    )
    parser.add_argument(
        "--logs", type=Path, default=None, help="keep the servers' and clients' logs in this folder"
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="install uvloop before the CLI starts (the CLI's own default now)",
    )
    return parse_with_smoke(parser, {"scenario": "smoke", "runs": 1})


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
