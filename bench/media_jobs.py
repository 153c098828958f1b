"""One run of each media lifecycle job over a large stale set: N conferences empty for 10
minutes (the conference-room reaper ends them all) and N stopped recordings (the
recording-finalize retry asks a real status service on loopback about each, answered
``ready``). Reports the wall time of the run and the CPU the PostgreSQL server spent on it
(its backends serving the job, from /proc), per job.

    .venv/bin/python bench/media_jobs.py --dsn postgresql://root@127.0.0.1:5432/postgres
    .venv/bin/python bench/media_jobs.py --smoke        # 200 of each, one run

A run here means the job's work until nothing is left (``max_run_duration`` lifted), so the
number is the cost of the whole sweep; in production each 5 s run stops at
``REALTIME_DISPATCH_MAX_RUN_DURATION`` and the next one goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    DEFAULT_DSN,
    cpu_seconds,
    free_port,
    machine,
    median_spread,
    print_table,
    quiet_production_logging,
    scratch_database,
    server_facts,
    write_json,
)

from realtime_dispatch.messenger.jobs.conference_reaper import ConferenceRoomReaper
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    RecordingFinalizeOptions,
)
from realtime_dispatch.messenger.jobs.recording_finalize import (
    RecordingFinalizeRetry,
)
from realtime_dispatch.messenger.jobs.scheduled import JobRun, JobWork
from realtime_dispatch.messenger.jobs.status_client import RecordingStatusClient

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


async def one_run(work: JobWork) -> float:
    run = JobRun(deadline=time.monotonic() + 3600, stop=asyncio.Event())
    started = time.monotonic()
    await work.run_once(run)
    return time.monotonic() - started


async def measure(url: str, size: int, status_url: str) -> dict[str, Any]:
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
                    pool, ConferenceReaperOptions(), metrics
                ),
                "recording-finalize-retry": RecordingFinalizeRetry(
                    pool, RecordingFinalizeOptions(status_url=status_url), metrics, client=client
                ),
            }
            for name, work in works.items():
                before = sum(cpu_seconds(p) for p in backends)
                wall = await one_run(work)
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="200 of each, one run")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.runs = 200, 1
    quiet_production_logging()
    app = Starlette(routes=[Route("/status/{recording_id}", ready)])
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.runs):
            async with scratch_database(args.dsn, "media_jobs") as url:
                runs.append(await measure(url, args.size, f"http://127.0.0.1:{port}/status"))
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
