"""One run of each media lifecycle job over a large stale set: N conferences empty for 10
minutes (the conference-room reaper ends them all) and N stopped recordings (the
recording-finalize retry asks a real status service on loopback about each, answered
``ready``). Reports the wall time of the run and the CPU the PostgreSQL server spent on it
(its backends serving the job, from /proc), per job.

    .venv/bin/python -m bench.dispatch.media_jobs --dsn postgresql://root@127.0.0.1:5432/postgres
    .venv/bin/python -m bench.dispatch.media_jobs --smoke        # 200 of each, one run

A run here means the job's work until nothing is left (``max_run_duration`` lifted), so the
number is the cost of the whole sweep; in production each 5 s run stops at
``REALTIME_DISPATCH_MAX_RUN_DURATION`` and the next one goes on.

``--lag`` measures the other half: the dispatcher's persist→push lag at ``--rate`` commits/s
(``bench/dispatch/lag.py``'s ``notify`` scenario, owners in their own processes) alone, and with
both jobs sweeping N stale conferences and N stopped recordings in the dispatcher's process, as
``serve`` runs them: the production schedule (a run every 5 s, at most 5 s long), the seeding
done before the owners start, the status service in a process of its own. The two alternate,
``--runs`` pairs; the lag of the jobs' own pushes is not counted, only the owners' messages.

    .venv/bin/python -m bench.dispatch.media_jobs --lag --rate 500 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import signal
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench._common import (
    DEFAULT_DSN,
    machine,
    median_spread,
    module_command,
    print_table,
    quiet_production_logging,
    scratch_database,
    server_facts,
    write_json,
)
from bench.dispatch.lag import lag_run
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions
from realtime_dispatch.messenger.jobs.conference_reaper import ConferenceRoomReaper
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
)
from realtime_dispatch.messenger.jobs.recording_finalize import (
    RecordingFinalizeRetry,
)
from realtime_dispatch.messenger.jobs.scheduled import JobRun, JobWork
from realtime_dispatch.messenger.jobs.service import media_jobs
from realtime_dispatch.messenger.jobs.status_client import RecordingStatusClient
from support.procs import cpu_seconds, free_port

SEED = """
WITH c AS (
    INSERT INTO messenger.chats (id, title, created_by)
    SELECT gen_random_uuid(), 'bench', gen_random_uuid() FROM generate_series(1, $1)
    RETURNING id, created_by
), conf AS (
    INSERT INTO messenger.conference_sessions (id, chat_id, started_by_user_id, room_name,
                                               started_at)
    SELECT gen_random_uuid(), c.id, c.created_by, 'conf-' || c.id, now() - interval '1 hour'
    FROM c RETURNING id, started_by_user_id
)
INSERT INTO messenger.conference_participants (id, conference_id, user_id, status, joined_at,
                                               left_at)
SELECT gen_random_uuid(), conf.id, conf.started_by_user_id, 'Left',
       now() - interval '1 hour', now() - interval '10 minutes'
FROM conf
"""
SEED_RECORDINGS = """
WITH calls AS (
    INSERT INTO messenger.call_sessions (id, caller_user_id, callee_user_id, room_name, status,
                                         answered_at, ended_at)
    SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'call-' || g, 'Ended',
           now() - interval '1 hour', now() - interval '30 minutes'
    FROM generate_series(1, $1) AS g
    RETURNING id, caller_user_id
)
INSERT INTO messenger.call_recordings (id, session_kind, call_id, started_by_user_id, status,
                                       started_at, stopped_at)
SELECT gen_random_uuid(), 'Direct', calls.id, calls.caller_user_id, 'Stopped',
       now() - interval '1 hour', now() - interval '30 minutes'
FROM calls
"""


async def ready(request: Request) -> Response:
    return Response(b'{"status":"ready"}', media_type="application/json")


async def one_run(work: JobWork, pause: float) -> float:
    run = JobRun(deadline=time.monotonic() + 3600, stop=asyncio.Event(), pause=pause)
    started = time.monotonic()
    await work.run_once(run)
    return time.monotonic() - started


async def measure(url: str, args: argparse.Namespace, status_url: str) -> dict[str, Any]:
    size = args.size
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SEED, size)
        await conn.execute(SEED_RECORDINGS, size)
        await conn.execute("VACUUM (ANALYZE)")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(url, min_size=4, max_size=4)
    assert pool is not None
    # The jobs' own backends: the server is shared, so the CPU of all its processes would count
    # other sessions' work (and drop the CPU of backends that exit meanwhile).
    held = [await pool.acquire() for _ in range(4)]
    backends = [int(await c.fetchval("SELECT pg_backend_pid()")) for c in held]
    for c in held:
        await pool.release(c)
    metrics = MediaJobMetrics(CollectorRegistry())
    result: dict[str, Any] = {}
    try:
        async with RecordingStatusClient(status_url) as client:
            works: dict[str, JobWork] = {
                "conference-room-reaper": ConferenceRoomReaper(
                    pool, ConferenceReaperOptions(), metrics, batch_size=args.batch
                ),
                "recording-finalize-retry": RecordingFinalizeRetry(
                    pool,
                    RecordingFinalizeOptions(status_url=status_url),
                    metrics,
                    client=client,
                    batch_size=args.batch,
                ),
            }
            for name, work in works.items():
                before = sum(cpu_seconds(p) for p in backends)
                wall = await one_run(work, args.pause)
                db_cpu = sum(cpu_seconds(p) for p in backends) - before
                result[name] = {
                    "wall_s": wall,
                    "db_cpu_s": db_cpu,
                    "per_item_ms": wall / size * 1e3,
                }
        ended = await pool.fetchval(
            "SELECT count(*) FROM messenger.conference_sessions WHERE status = 'Ended'"
        )
        available = await pool.fetchval(
            "SELECT count(*) FROM messenger.call_recordings WHERE status = 'Available'"
        )
        pushes = await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox")
        if (ended, available, pushes) != (size, size, size * 3):
            raise SystemExit(f"incomplete sweep: {ended=} {available=} {pushes=}")
    finally:
        await pool.close()
    return result


def status_server(port: int) -> uvicorn.Server:
    """The media pipeline's status service, answering ``ready`` for every recording."""
    app = Starlette(routes=[Route("/status/{recording_id}", ready)])
    return uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )


# --- the dispatcher's lag while the jobs sweep ---------------------------------------------------

READY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 18\r\n\r\n"
    b'{"status":"ready"}'
)


async def lean_status_server(port: int) -> None:
    """The status service for ``--lag``, in a process of its own: ``ready`` to every request
    on a kept-alive connection, at the least CPU Python allows. The media pipeline runs on
    other machines; here it shares the two cores, so the less it takes, the less of the
    difference between the two runs is the bench's own."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await reader.readuntil(b"\r\n\r\n")  # a GET: no body
                writer.write(READY)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


async def seed_stale(url: str, size: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "TRUNCATE messenger.conference_sessions, messenger.call_recordings,"
            " messenger.call_sessions CASCADE"
        )
        await conn.execute(SEED, size)
        await conn.execute(SEED_RECORDINGS, size)
        await conn.execute("VACUUM (ANALYZE)")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def run_jobs(url: str, status_url: str, schedule: JobSchedule, stop: asyncio.Event) -> None:
    """Both jobs on ``schedule``, as ``hub`` and ``serve`` run them, until ``stop``."""
    pool = await asyncpg.create_pool(url, min_size=2, max_size=4)
    assert pool is not None
    try:
        async with media_jobs(
            pool,
            connect=lambda: asyncpg.connect(url),
            schedule=schedule,
            calls=CallReaperOptions(),
            conferences=ConferenceReaperOptions(),
            recordings=RecordingFinalizeOptions(status_url=status_url),
            registry=CollectorRegistry(),
            on_failure=stop.set,
        ):
            await stop.wait()
    finally:
        await pool.close()


def job_schedule(**pace: Any) -> JobSchedule:
    """The jobs' schedule as ``serve`` builds it at the defaults: the dispatcher's lease and run
    length, and ``pace`` (``batch_size``, ``pause``) where given."""
    dispatch = RealtimeDispatchOptions()
    return JobSchedule(
        lock_ttl=dispatch.lock_ttl, max_run_duration=dispatch.max_run_duration, **pace
    )


async def jobs_process(spec: dict[str, Any]) -> None:
    """``--jobs-process``: say ``ready`` once imported, then, told the start time on stdin,
    :func:`run_jobs` from then until SIGTERM (a ``hub`` beside the worker)."""
    quiet_production_logging()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    schedule = job_schedule(batch_size=spec["batch"], pause=spec["pause"])
    print("ready", flush=True)
    start_at = float(await loop.run_in_executor(None, sys.stdin.readline))
    await asyncio.sleep(start_at - time.time())
    await run_jobs(spec["url"], spec["status_url"], schedule, stop)


@contextlib.asynccontextmanager
async def sweeping(
    url: str, *, args: argparse.Namespace, status_url: str, report: dict[str, Any]
) -> AsyncIterator[None]:
    """Seed the stale sets, then run both jobs from the owners' first counted commit until the
    block ends, in the dispatcher's process (``--jobs-in-process``, as ``serve``) or in one of
    their own (as ``hub`` beside ``worker``, started before the owners so that its start-up is
    not counted); ``report`` gets what they did meanwhile."""
    await seed_stale(url, args.size)
    stop = asyncio.Event()
    proc = None
    if not args.jobs_in_process:
        spec = {"url": url, "status_url": status_url, "batch": args.batch, "pause": args.pause}
        proc = await asyncio.create_subprocess_exec(
            *module_command(__spec__.name),
            "--jobs-process",
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        if await proc.stdout.readline() != b"ready\n":
            raise SystemExit("the jobs' process did not start")
    start_at = time.time() + 3.0  # after the owners' connect (1.5 s) and warm-up (1 s)

    async def jobs() -> None:
        if proc is None:
            schedule = job_schedule(batch_size=args.batch, pause=args.pause)
            await asyncio.sleep(start_at - time.time())
            await run_jobs(url, status_url, schedule, stop)
            return
        assert proc.stdin is not None
        proc.stdin.write(f"{start_at}\n".encode())
        await proc.stdin.drain()
        await stop.wait()
        proc.send_signal(signal.SIGTERM)
        if await proc.wait() != 0:
            raise SystemExit("the jobs' process failed")

    task = asyncio.create_task(jobs())
    try:
        yield
    finally:
        stop.set()
        await task
        conn = await asyncpg.connect(url)
        try:
            report["ended"] = await conn.fetchval(
                "SELECT count(*) FROM messenger.conference_sessions WHERE status = 'Ended'"
            )
            report["available"] = await conn.fetchval(
                "SELECT count(*) FROM messenger.call_recordings WHERE status = 'Available'"
            )
        finally:
            await conn.close()


async def wait_for_port(port: int) -> None:
    for _ in range(1000):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            return
        await asyncio.sleep(0.01)
    raise SystemExit(f"the status service did not start on port {port}")


async def lag_beside_jobs(args: argparse.Namespace) -> None:
    port = free_port()
    status = await asyncio.create_subprocess_exec(
        *module_command(__spec__.name), "--status-server", str(port)
    )
    lag_args = argparse.Namespace(
        rate=args.rate,
        seconds=args.seconds,
        owners=8,
        processes=2,
        owner_command="send_message",
        linger=None,  # the shipped one
    )
    status_url = f"http://127.0.0.1:{port}/status"
    pairs: dict[str, list[dict[str, Any]]] = {"alone": [], "beside the jobs": []}
    try:
        await wait_for_port(port)
        async with scratch_database(args.dsn, "media_jobs_lag") as url:
            for run in range(args.runs):
                alone = await lag_run(url, lag_args, listen=True)
                swept: dict[str, Any] = {}
                beside = await lag_run(
                    url,
                    lag_args,
                    listen=True,
                    beside=functools.partial(
                        sweeping, args=args, status_url=status_url, report=swept
                    ),
                )
                beside.update(swept)
                for name, r in (("alone", alone), ("beside the jobs", beside)):
                    pairs[name].append(r)
                    print(
                        f"  run {run + 1} {name:<15} {r['commit_rate']:5,.0f} commits/s,"
                        f" lag p50 {r['p50_ms']:.1f} p95 {r['p95_ms']:.1f}"
                        f" p99 {r['p99_ms']:.1f} max {r['max_ms']:.1f} ms,"
                        f" {r['missing']} missing, dispatcher CPU {r['dispatcher_cpu_s']:.2f} s,"
                        f" machine busy {r['machine_busy']:.0%}"
                        + (
                            f"; {r['ended']:,} conferences ended,"
                            f" {r['available']:,} recordings settled"
                            if "ended" in r
                            else ""
                        ),
                        flush=True,
                    )
    finally:
        status.terminate()
        await status.wait()
    rows = []
    for name, runs in pairs.items():
        rows.append(
            [name]
            + [statistics.median(r[k] for r in runs) for k in ("p50_ms", "p95_ms", "p99_ms")]
            + [sum(r["missing"] for r in runs)]
        )
    print_table(["dispatcher", "p50 ms", "p95 ms", "p99 ms", "missing"], rows)
    ratios = {
        k: round(
            statistics.median(
                b[k] / a[k] for a, b in zip(pairs["alone"], pairs["beside the jobs"], strict=True)
            ),
            2,
        )
        for k in ("p50_ms", "p95_ms", "p99_ms")
    }
    print(f"beside the jobs / alone, median of the per-pair ratios: {ratios}")
    path = write_json(
        "media-jobs-lag-smoke" if args.smoke else "media-jobs-lag",
        {
            "args": vars(args),
            "pairs": pairs,
            "ratios": ratios,
            "machine": machine(),
            "server": await server_facts(args.dsn),
        },
    )
    print(f"written {path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lag", action="store_true", help="the dispatcher's lag beside the jobs")
    parser.add_argument("--rate", type=float, default=500.0, help="--lag: owner commits/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="--lag: owner load per run")
    parser.add_argument("--smoke", action="store_true", help="200 of each, one run")
    parser.add_argument(
        "--jobs-in-process", action="store_true", help="--lag: the jobs beside the dispatcher"
    )
    schedule = job_schedule()
    parser.add_argument("--batch", type=int, default=schedule.batch_size, help="items per batch")
    parser.add_argument(
        "--pause", type=float, default=schedule.pause, help="rest after a batch, × its time"
    )
    parser.add_argument("--status-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--jobs-process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.status_server:
        await lean_status_server(args.status_server)
        return
    if args.jobs_process:
        await jobs_process(json.loads(args.jobs_process))
        return
    if args.smoke:
        args.size, args.runs = 200, 1
        args.rate, args.seconds = 100.0, 3.0
    quiet_production_logging()
    if not args.lag:
        await sweeps(args)
    if args.lag or args.smoke:  # the smoke goes through both halves
        await lag_beside_jobs(args)


async def sweeps(args: argparse.Namespace) -> None:
    """``--runs`` whole sweeps of each job, in a scratch database each."""
    port = free_port()
    server = status_server(port)
    serving = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.runs):
            async with scratch_database(args.dsn, "media_jobs") as url:
                runs.append(await measure(url, args, f"http://127.0.0.1:{port}/status"))
    finally:
        server.should_exit = True
        await serving
    rows = []
    summary: dict[str, Any] = {}
    for job in ("conference-room-reaper", "recording-finalize-retry"):
        wall = median_spread([r[job]["wall_s"] for r in runs])
        cpu = median_spread([r[job]["db_cpu_s"] for r in runs])
        summary[job] = {"wall_s": wall, "db_cpu_s": cpu}
        rows.append([job, args.size, wall["median"], wall["min"], wall["max"], cpu["median"]])
    print_table(["job", "items", "wall s (median)", "min", "max", "db cpu s (median)"], rows)
    path = write_json(
        "media-jobs-smoke" if args.smoke else "media-jobs",
        {
            "size": args.size,
            "runs": runs,
            "summary": summary,
            "machine": machine(),
            "server": await server_facts(args.dsn),
        },
    )
    print(f"written {path}")


if __name__ == "__main__":
    asyncio.run(main())
