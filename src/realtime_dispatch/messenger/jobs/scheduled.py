"""A scheduled single-runner job, the way the dispatcher runs its passes: every ``interval`` a
run takes the job's advisory lock on the job's own connection (a busy lock skips the run, so an
operator holding the key pauses the job), does the work for at most ``max_run_duration``, and
releases the lock. The lock is a lease of ``lock_ttl``: a run still going then (a hung status
service, a stuck query) loses its connection, which drops the lock, and is cancelled; whatever
it committed stays.

A failed run is counted and logged by error class and retried on the next tick; it never ends
the loop. Stop requests are honoured between items: the work asks :meth:`JobRun.stopping`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from uuid import uuid4

import asyncpg
import structlog
from opentelemetry import trace

from realtime_dispatch.database.connections import is_unavailable
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import JOB_BATCH_SIZE, JobSchedule
from realtime_dispatch.outbox.queries import load_queries

_log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("realtime_dispatch.messenger.jobs")
QUERIES = load_queries("realtime_dispatch.messenger.jobs")

Connect = Callable[[], Awaitable[Any]]


@dataclass(slots=True)
class JobRun:
    """What the work of one run may ask: whether to stop before the next item or batch."""

    deadline: float
    """``time.monotonic()`` past which no new batch starts (``max_run_duration``)."""
    stop: asyncio.Event
    pause: float = 0.0
    """After each batch, :meth:`rest` waits this many times the batch's own duration."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the run did, for its log line and span (e.g. ``{"ended": 3}``)."""

    def stopping(self) -> bool:
        return self.stop.is_set()

    async def rest(self, batch_started: float) -> None:
        """Leave the database, the event loop and the dispatcher the time this batch took,
        ``pause`` times over, before the next one: a backlog is swept at a pace that the
        dispatcher's own lag doesn't feel (docs/BENCHMARKS.md). A stop ends the wait."""
        delay = (time.monotonic() - batch_started) * self.pause
        if delay > 0 and not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay)

    def out_of_time(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.deadline

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


class JobWork(Protocol):
    name: str
    """The job's metric label, e.g. ``conference-room-reaper``."""

    async def run_once(self, run: JobRun) -> None: ...


OptionsT = TypeVar("OptionsT")


class BatchJob(Generic[OptionsT]):
    """What the media jobs' work holds: the pool its batches run on, its options, the jobs'
    metrics and the batch size (rows per transaction)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        options: OptionsT,
        metrics: MediaJobMetrics,
        *,
        batch_size: int = JOB_BATCH_SIZE,
    ) -> None:
        self._pool = pool
        self.options = options
        self.metrics = metrics
        self._batch = batch_size


def lock_key(name: str) -> str:
    """The job's single-runner lock: ``hashtextextended(key, 0)``, as the dispatcher's."""
    return f"job:scheduled:messenger-{name}"


class ScheduledJob:
    def __init__(
        self,
        work: JobWork,
        *,
        connect: Connect,
        schedule: JobSchedule,
        metrics: MediaJobMetrics,
    ) -> None:
        """``connect`` opens the job's own session (the lock lives on it; not a pooled one)."""
        self.work = work
        self.key = lock_key(work.name)
        self._connect = connect
        self._schedule = schedule
        self._metrics = metrics
        self._conn: Any = None
        self._stop = asyncio.Event()
        self.runs = 0

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until :meth:`request_stop` (or cancellation). Never raises for database errors."""
        _log.info("job_started", job=self.work.name, interval=self._schedule.interval)
        try:
            while not self._stop.is_set():
                await self.turn()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._schedule.interval)
        finally:
            await self._close()
            _log.info("job_stopped", job=self.work.name)

    async def turn(self) -> JobRun | None:
        """One scheduled run: the run's record, or None when it was skipped or failed."""
        name = self.work.name
        try:
            if self._conn is None or self._conn.is_closed():
                await self._close()
                self._conn = await self._connect()
            conn = self._conn
            if not await conn.fetchval(QUERIES["try_lock"], self.key):
                self._metrics.runs.labels(name, "skipped_locked").inc()
                _log.debug("job_run_skipped", job=name, reason="lock_busy")
                return None
            try:
                return await self._leased_run(conn)
            finally:
                if not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.fetchval(QUERIES["unlock"], self.key)
        except Exception as exc:
            self._metrics.runs.labels(name, "failed").inc()
            reason = "database_unavailable" if is_unavailable(exc) else type(exc).__name__
            _log.warning("job_run_failed", job=name, reason=reason, error=type(exc).__name__)
            if is_unavailable(exc):
                await self._close()
            return None

    async def _leased_run(self, conn: Any) -> JobRun | None:
        name = self.work.name
        started = time.monotonic()
        run = JobRun(
            deadline=started + self._schedule.max_run_duration,
            stop=self._stop,
            pause=self._schedule.pause,
        )
        run_id = str(uuid4())
        with _tracer.start_as_current_span(f"realtime_dispatch.job.{name}") as span:
            span.set_attribute("job.name", name)
            span.set_attribute("job.run_id", run_id)
            task = asyncio.ensure_future(self.work.run_once(run))
            try:
                done, _ = await asyncio.wait({task}, timeout=self._schedule.lock_ttl)
            except asyncio.CancelledError:
                task.cancel()
                raise
            if not done:
                # Closing the session is what drops the advisory lock, whatever the run does.
                conn.terminate()
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                self._metrics.runs.labels(name, "lease_expired").inc()
                _log.error("job_lease_expired", job=name, lock_ttl=self._schedule.lock_ttl)
                span.set_attribute("job.lease_expired", True)
                return None
            task.result()  # a failure is the caller's to count
            duration = time.monotonic() - started
            for key, value in run.counts.items():
                span.set_attribute(f"job.{key}", value)
        self.runs += 1
        self._metrics.runs.labels(name, "ran").inc()
        self._metrics.duration.labels(name).observe(duration)
        self._metrics.last_run.labels(name).set(time.time())
        log = _log.info if any(run.counts.values()) else _log.debug
        log("job_completed", job=name, run_id=run_id, duration_ms=round(duration * 1000, 2),
            **run.counts)  # fmt: skip
        return run

    async def aclose(self) -> None:
        """Close the job's own session (``run`` does it when it ends; ``turn`` leaves it open
        for the next turn)."""
        await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2)
            if not conn.is_closed():
                conn.terminate()
