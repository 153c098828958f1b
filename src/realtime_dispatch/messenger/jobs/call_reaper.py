"""The call-timeout reaper (the spec's CallTimeoutReaperJob) as a scheduled job, like the media
lifecycle jobs: a call ringing longer than ``ring_timeout`` becomes ``Missed`` with
``CallMissed`` to both parties; one answered longer ago than ``max_duration`` becomes ``Ended``
by nobody with ``CallEnded`` to both (:mod:`realtime_dispatch.messenger.reaper`, one
transaction per batch). Its own lock (``job:scheduled:messenger-call-timeout-reaper``), runs,
metrics and alert are the media jobs'."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.jobs.metrics import CALL_REAPER
from realtime_dispatch.messenger.jobs.scheduled import BatchJob, JobRun
from realtime_dispatch.messenger.reaper import (
    CALL_MAX_DURATION_SECONDS,
    CALL_RING_TIMEOUT_SECONDS,
    reap_overlong_calls,
    reap_unanswered_calls,
)

Sweep = Callable[[DbConnection, int], Awaitable[list[UUID]]]


@dataclass(frozen=True, slots=True)
class CallReaperOptions:
    ring_timeout: float = CALL_RING_TIMEOUT_SECONDS
    max_duration: float = CALL_MAX_DURATION_SECONDS


class CallTimeoutReaper(BatchJob[CallReaperOptions]):
    """The job's work: missed calls, then overlong ones, each in batches until one is short of
    full, the run's time is up or a stop is asked (resting after each full batch)."""

    name = CALL_REAPER

    async def run_once(self, run: JobRun) -> None:
        ring, longest = self.options.ring_timeout, self.options.max_duration

        async def missed(conn: DbConnection, limit: int) -> list[UUID]:
            return await reap_unanswered_calls(conn, ring_timeout=ring, limit=limit)

        async def overlong(conn: DbConnection, limit: int) -> list[UUID]:
            return await reap_overlong_calls(conn, max_duration=longest, limit=limit)

        for reason, sweep in (("missed", missed), ("overlong", overlong)):
            await self._sweep(run, reason, sweep)

    async def _sweep(self, run: JobRun, reason: str, sweep: Sweep) -> None:
        while not run.out_of_time():
            started = time.monotonic()
            async with self._pool.acquire() as conn:
                calls = await sweep(conn, self._batch)
            run.add(f"calls_{reason}", len(calls))
            self.metrics.calls_reaped.labels(reason).inc(len(calls))
            if len(calls) < self._batch:
                return
            await run.rest(started)
