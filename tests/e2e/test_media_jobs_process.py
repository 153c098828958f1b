"""The media lifecycle jobs in the real ``hub`` process (where the call-timeout reaper runs):
they end a stale conference and settle a stopped recording on their own and export their
metrics; killed with -9 mid-run, they leave nothing half-written and the next run finishes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import asyncpg
import httpx
from prometheus_client import CollectorRegistry

from realtime_dispatch.messenger import chats, conferences
from realtime_dispatch.messenger.jobs.conference_reaper import ConferenceRoomReaper
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    RecordingFinalizeOptions,
)
from realtime_dispatch.messenger.jobs.recording_finalize import RecordingFinalizeRetry
from realtime_dispatch.messenger.jobs.scheduled import JobRun
from realtime_dispatch.messenger.jobs.status_client import RecordingStatusClient
from support.procs import cli_env, free_port, start_cli, stop, wait_until
from tests.integration.status_service import StatusService, status_service, stopped_call_recording


async def overlong_conference(pool: asyncpg.Pool) -> tuple[UUID, UUID, UUID]:
    """A live conference with its starter still in, started 9 hours ago: (chat, conference,
    starter)."""
    starter = uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=starter, title="t", members=[])
        conference = await conferences.start_conference(conn, chat_id=chat, actor=starter)
        await conn.execute(
            "UPDATE messenger.conference_sessions SET started_at = now() - interval '9 hours'"
            " WHERE id = $1",
            conference,
        )
    return chat, conference, starter


@contextlib.asynccontextmanager
async def hub(
    database_url: str, status_url: str
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_DEV="true",
        REALTIME_MEDIA_RECORDING_STATUS_URL=status_url,
    )
    proc = await start_cli("hub", "--port", str(port), env=env)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.returncode is None:
            await stop(proc)


async def count(pool: asyncpg.Pool, sql: str, *args: object) -> int:
    return int(await pool.fetchval(sql, *args))


async def test_the_hub_process_runs_both_jobs(pool: asyncpg.Pool, database_url: str) -> None:
    _, conference, _ = await overlong_conference(pool)
    recording, _, _ = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(recording, {"status": "ready"})
    async with status_service(service) as status_url, hub(database_url, status_url) as (url, _):
        await wait_until(
            lambda: pool.fetchval(
                "SELECT status = 'Ended' FROM messenger.conference_sessions WHERE id = $1",
                conference,
            ),
            within=30,
        )
        await wait_until(
            lambda: pool.fetchval(
                "SELECT status = 'Available' FROM messenger.call_recordings WHERE id = $1",
                recording,
            ),
            within=30,
        )
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).text
    for job in ("call-timeout-reaper", "conference-room-reaper", "recording-finalize-retry"):
        assert f'messenger_realtime_job_last_run_timestamp_seconds{{job="{job}"}}' in metrics
        assert f'messenger_realtime_job_runs_total{{job="{job}",result="ran"}}' in metrics
        assert f'messenger_realtime_job_enabled{{job="{job}"}} 1.0' in metrics  # the alerts' cue
    assert 'messenger_realtime_conference_reaped_total{reason="overlong"} 1.0' in metrics
    assert 'messenger_realtime_recording_finalized_total{outcome="available"} 1.0' in metrics


async def test_kill_9_mid_run_then_the_next_run_finishes(
    pool: asyncpg.Pool, database_url: str
) -> None:
    _, conference, starter = await overlong_conference(pool)
    recording, _, _ = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(recording, {"status": "ready"})
    service.hold = True
    async with status_service(service) as status_url, pool.acquire() as blocker:
        # The reaper ends the conference, then waits on the starter's roster row (held here):
        # the process is mid-transaction when it dies.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            "SELECT 1 FROM messenger.conference_participants WHERE user_id = $1 FOR UPDATE",
            starter,
        )
        async with hub(database_url, status_url) as (_, proc):
            await wait_until(lambda: service.held == 1, within=30)  # an ask is in flight
            await wait_until(
                lambda: pool.fetchval("SELECT count(*) > 0 FROM pg_locks WHERE NOT granted"),
                within=30,
            )
            proc.kill()  # SIGKILL: no outcome, no commit
            await proc.wait()
        await tx.rollback()
    # Nothing half-written: the conference is live, no push; the claim alone was committed.
    assert (
        await pool.fetchval(
            "SELECT status FROM messenger.conference_sessions WHERE id = $1", conference
        )
        == "Active"
    )
    assert (
        await count(
            pool, "SELECT count(*) FROM messenger.realtime_outbox WHERE kind = 'ConferenceEnded'"
        )
        == 0
    )
    row = await pool.fetchrow(
        "SELECT status, finalize_attempts FROM messenger.call_recordings WHERE id = $1", recording
    )
    assert (row["status"], row["finalize_attempts"]) == ("Stopped", 1)

    # The next run (here, in this process) finishes both.
    service = StatusService()
    service.answer(recording, {"status": "ready"})
    await pool.execute("UPDATE messenger.call_recordings SET finalize_next_at = now()")
    metrics = MediaJobMetrics(CollectorRegistry())
    async with status_service(service) as status_url, RecordingStatusClient(status_url) as client:
        works = [
            ConferenceRoomReaper(pool, ConferenceReaperOptions(), metrics),
            RecordingFinalizeRetry(
                pool, RecordingFinalizeOptions(status_url=status_url), metrics, client=client
            ),
        ]

        async def finished() -> bool:
            for work in works:  # the dead backend may hold its rows for a moment: SKIP LOCKED
                await work.run_once(JobRun(deadline=time.monotonic() + 5, stop=asyncio.Event()))
            ended = await pool.fetchval(
                "SELECT status = 'Ended' FROM messenger.conference_sessions WHERE id = $1",
                conference,
            )
            available = await pool.fetchval(
                "SELECT status = 'Available' FROM messenger.call_recordings WHERE id = $1",
                recording,
            )
            return bool(ended and available)

        await wait_until(finished, within=30, interval=0.1)
    assert (
        await count(
            pool, "SELECT count(*) FROM messenger.realtime_outbox WHERE kind = 'ConferenceEnded'"
        )
        == 1
    )
    assert (
        await count(
            pool, "SELECT count(*) FROM messenger.realtime_outbox WHERE kind = 'RecordingAvailable'"
        )
        == 2
    )
    assert (
        await pool.fetchval(
            "SELECT status FROM messenger.conference_participants WHERE user_id = $1", starter
        )
        == "Left"
    )
