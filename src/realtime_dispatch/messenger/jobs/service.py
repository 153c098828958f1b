"""The scheduled jobs of the reference messenger for the duration of a block: the call-timeout
reaper and both media lifecycle jobs (``serve`` and ``hub`` run them, on the reference
messenger only)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import asyncpg
import structlog
from prometheus_client import CollectorRegistry

from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions, CallTimeoutReaper
from realtime_dispatch.messenger.jobs.conference_reaper import ConferenceRoomReaper
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
)
from realtime_dispatch.messenger.jobs.recording_finalize import RecordingFinalizeRetry
from realtime_dispatch.messenger.jobs.scheduled import Connect, JobWork, ScheduledJob
from realtime_dispatch.messenger.jobs.status_client import RecordingStatusClient

_log = structlog.get_logger(__name__)


@contextlib.asynccontextmanager
async def media_jobs(
    pool: asyncpg.Pool,
    *,
    connect: Connect,
    schedule: JobSchedule,
    calls: CallReaperOptions,
    conferences: ConferenceReaperOptions,
    recordings: RecordingFinalizeOptions,
    registry: CollectorRegistry,
    on_failure: Callable[[], None],
) -> AsyncIterator[list[ScheduledJob]]:
    """Run the call-timeout reaper, the conference-room reaper and the recording-finalize retry
    until the block ends.
    ``connect`` opens each job's own lock session. A job whose loop dies is logged and
    ``on_failure`` is called (the server stops and exits non-zero)."""
    metrics = MediaJobMetrics(registry)
    async with contextlib.AsyncExitStack() as stack:
        client = None
        if recordings.status_url is not None:
            client = await stack.enter_async_context(RecordingStatusClient(recordings.status_url))
        works: list[JobWork] = [
            CallTimeoutReaper(pool, calls, metrics, batch_size=schedule.batch_size),
            ConferenceRoomReaper(pool, conferences, metrics, batch_size=schedule.batch_size),
            RecordingFinalizeRetry(
                pool, recordings, metrics, client=client, batch_size=schedule.batch_size
            ),
        ]
        jobs = [ScheduledJob(w, connect=connect, schedule=schedule, metrics=metrics) for w in works]
        for work in works:
            metrics.enabled.labels(work.name).set(1)
        tasks = [asyncio.create_task(job.run(), name=job.key) for job in jobs]

        def done(t: asyncio.Task[None]) -> None:
            if not t.cancelled():
                error = t.exception()
                _log.error(
                    "job_loop_stopped",
                    job=t.get_name(),
                    error=type(error).__name__ if error else "returned",
                )
                on_failure()

        for task in tasks:
            task.add_done_callback(done)
        try:
            yield jobs
        finally:
            for job, task in zip(jobs, tasks, strict=True):
                task.remove_done_callback(done)
                job.request_stop()
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
