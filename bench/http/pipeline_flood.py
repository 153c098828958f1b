"""The pipelining flood (docs/RELIABILITY.md, H28), one command:

    python -m bench.http.pipeline_flood [--scenarios 1:read,1:quiet,10:read,10:quiet]
                                   [--seconds 5] [--settle 5] [--src SRC] [--smoke]

For each scenario (``connections:read`` or ``connections:quiet``) it starts a fresh
``realtime-dispatch hub`` (deployment mode, as the CLI runs it: uvloop, the GC tuning), measures
a victim's ``/healthz`` (a fresh connection every 100 ms) for ``--seconds`` idle, then for
``--seconds`` while a separate process floods it: each of ``connections`` connections writes
``GET /healthz`` a hundred times per send, reading the answers (``read``) or never reading them
(``quiet``). The hub's RSS is sampled every 100 ms. The flood's connections are then closed and
the hub left idle for ``--settle`` seconds: its RSS then says whether a dead connection's memory
came back. Prints, per scenario, the hub's RSS (before, peak, end of the flood, after the
settle), the victim's ``/healthz`` p50/p99/max idle and flooded, how many requests the flood
wrote and how many answers (200 and other) it got, and the tracebacks in the hub's log.
``--src``: a source tree put first on ``PYTHONPATH`` (another version of the hub, to measure
before and after).

    python -m bench.http.pipeline_flood flood --port PORT --connections N --seconds S [--quiet]

is the flooding process (started by the above; prints its counts as JSON).
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
from typing import Any

from bench._common import module_command, parse_with_smoke
from bench.http.header_flood import timed_requests
from bench.hub.fanout import SECRET, SERVICE_KEY, drop_database, prepare_database, wait_http
from support.procs import free_port, memory_kib
from support.stats import percentile

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
PER_SEND = 100
STATUS = b"HTTP/1.1 "


# --- the flooding process ---------------------------------------------------------------------


class Answers:
    """Status lines counted in a stream of responses (a line split across reads counts too)."""

    def __init__(self) -> None:
        self.ok = 0
        self.other: dict[str, int] = {}
        self._tail = b""

    def feed(self, data: bytes) -> None:
        data = self._tail + data
        start = 0
        while (at := data.find(STATUS, start)) >= 0:
            code = data[at + len(STATUS) : at + len(STATUS) + 3]
            if len(code) < 3:
                break
            if code == b"200":
                self.ok += 1
            else:
                self.other[code.decode("latin-1")] = self.other.get(code.decode("latin-1"), 0) + 1
            start = at + len(STATUS) + 3
        self._tail = data[max(start, len(data) - len(STATUS) - 2) :]


async def flood_one(port: int, stop: asyncio.Event, quiet: bool, counts: dict[str, Any]) -> None:
    """One connection writing pipelined requests until ``stop``; its answers read as they come
    (or, ``quiet``, for at most a second after the stop)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = Answers()
    burst = REQUEST * PER_SEND

    async def read(until: float | None) -> None:
        while True:
            timeout = None if until is None else until - time.monotonic()
            if timeout is not None and timeout <= 0:
                return
            try:
                data = await asyncio.wait_for(reader.read(1 << 16), timeout)
            except TimeoutError:
                return
            if not data:
                counts["closed_by_hub"] += 1
                return
            answers.feed(data)

    reading = None if quiet else asyncio.ensure_future(read(None))

    async def write() -> None:
        while True:
            writer.write(burst)
            counts["sent"] += PER_SEND
            await writer.drain()

    writing = asyncio.ensure_future(write())
    await asyncio.wait([writing, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED")
    writing.cancel()
    try:
        await writing
    except asyncio.CancelledError:
        pass
    except (ConnectionError, OSError):
        counts["write_failed"] += 1
    if reading is not None:
        await asyncio.sleep(0.2)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await reading
    else:
        with contextlib.suppress(ConnectionError, OSError):
            await read(time.monotonic() + 1.0)
    counts["ok"] += answers.ok
    for code, n in answers.other.items():
        counts["other"][code] = counts["other"].get(code, 0) + n
    writer.transport.abort()  # cut, not a graceful close: what a flooder does


async def flood_main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    counts: dict[str, Any] = {"sent": 0, "ok": 0, "other": {}}
    counts.update(closed_by_hub=0, write_failed=0)
    asyncio.get_running_loop().call_later(args.seconds, stop.set)
    await asyncio.gather(
        *(flood_one(args.port, stop, args.quiet, counts) for _ in range(args.connections))
    )
    print(json.dumps(counts))


# --- the driver -------------------------------------------------------------------------------


async def sample_rss(pid: int, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        with contextlib.suppress(FileNotFoundError):
            peak[0] = max(peak[0], memory_kib(pid)["VmRSS"])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def latency(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(percentile(values, 0.99), 1),
        "max": round(max(values), 1),
    }


async def scenario(
    args: argparse.Namespace, bench_dsn: str, connections: int, quiet: bool
) -> dict[str, Any]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(
        REALTIME_DATABASE_URL=bench_dsn,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_LOG_LEVEL="warning",
    )
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.src, env.get("PYTHONPATH")]))
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        hub = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "realtime_dispatch.cli.main", "hub", "--port", str(port),
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            await wait_http(port)
            errors: list[str] = []
            idle = await timed_requests(base, args.seconds, lambda h: h.get("/healthz"), errors)
            before = memory_kib(hub.pid)["VmRSS"]
            peak = [before]
            stop = asyncio.Event()
            sampler = asyncio.ensure_future(sample_rss(hub.pid, stop, peak))
            flood_command = [
                *module_command(__spec__.name), "flood", "--port", str(port),
                "--connections", str(connections), "--seconds", str(args.seconds),
                *(["--quiet"] if quiet else []),
            ]  # fmt: skip
            flooder = await asyncio.create_subprocess_exec(
                *flood_command, stdout=asyncio.subprocess.PIPE
            )
            flooded_errors: list[str] = []
            flooded, (out, _) = await asyncio.gather(
                timed_requests(base, args.seconds, lambda h: h.get("/healthz"), flooded_errors),
                flooder.communicate(),
            )
            end = memory_kib(hub.pid)["VmRSS"]
            await asyncio.sleep(args.settle)
            stop.set()
            await sampler
            settled = memory_kib(hub.pid)["VmRSS"]
            after: list[str] = []
            await timed_requests(base, 0.5, lambda h: h.get("/healthz"), after)
        finally:
            hub.terminate()
            await hub.wait()
        log.seek(0)
        hub_log = log.read().decode("utf-8", "replace")
    counts = json.loads(out)
    return {
        "connections": connections,
        "reads_answers": not quiet,
        "hub_rss_mb": {
            "before": round(before / 1024, 1),
            "peak": round(peak[0] / 1024, 1),
            "end_of_flood": round(end / 1024, 1),
            f"after_{args.settle:g}s_idle": round(settled / 1024, 1),
        },
        "healthz_ms_idle": latency(idle),
        "healthz_ms_flooded": latency(flooded),
        "healthz_errors": len(errors) + len(flooded_errors) + len(after),
        "flood_requests_sent": counts["sent"],
        "flood_answers_200": counts["ok"],
        "flood_answers_other": counts["other"],
        "flood_closed_by_hub": counts["closed_by_hub"],
        "hub_tracebacks": hub_log.count("Traceback"),
    }


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    bench_dsn, _ = await prepare_database(dsn, 1)
    runs = []
    try:
        for spec in args.scenarios.split(","):
            connections, _, mode = spec.partition(":")
            if mode not in ("read", "quiet"):
                raise SystemExit(f"--scenarios: {spec!r} is not connections:read|quiet")
            runs.append(await scenario(args, bench_dsn, int(connections), mode == "quiet"))
    finally:
        await drop_database(dsn, bench_dsn)
    return {
        "src": args.src or "this checkout",
        "seconds": args.seconds,
        "settle_seconds": args.settle,
        "requests_per_send": PER_SEND,
        "scenarios": runs,
    }


def main() -> None:
    if sys.argv[1:2] == ["flood"]:
        flood = argparse.ArgumentParser()
        flood.add_argument("flood")
        flood.add_argument("--port", type=int, required=True)
        flood.add_argument("--connections", type=int, default=1)
        flood.add_argument("--seconds", type=float, default=5)
        flood.add_argument("--quiet", action="store_true")
        asyncio.run(flood_main(flood.parse_args()))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn")
    parser.add_argument("--scenarios", default="1:read,1:quiet,10:read,10:quiet")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--settle", type=float, default=5)
    parser.add_argument("--src", help="a source tree first on PYTHONPATH (another version)")
    args = parse_with_smoke(parser, {"scenarios": "2:read,2:quiet", "seconds": 1.0, "settle": 1.0})
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
