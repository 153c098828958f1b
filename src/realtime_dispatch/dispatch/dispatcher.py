"""One dispatcher pass: claim → build → push → outcome, batch after batch.

The caller (:mod:`realtime_dispatch.dispatch.runner`) holds the single-runner lock around
:meth:`Dispatcher.run_pass`. Within a pass:

1. claim up to ``batch_size`` due rows (one statement, SKIP LOCKED, attempts pre-incremented,
   backoff set) and commit;
2. build every row's payload (one projection query per kind group);
3. push outside any transaction, slice by slice, checking for a stop request and the end of
   ``max_run_duration`` between slices; every push is bounded by the time left (the
   ``deadline`` handed to :meth:`~realtime_dispatch.delivery.push.HubPublisher.publish`, with
   the membership marks of :attr:`Dispatcher.mark`); rows never pushed because of a
   stop or the end of the pass are released (due again at once, attempt not counted);
4. write the outcomes in one transaction, each guarded by the row_version of the claim: once per
   batch, or sooner when pushing is slow: outcomes that have waited ``OUTCOME_DELAY`` are
   written while the next slice is being pushed (a slow push never holds back the status of the
   slices before it), and at once on a stop;
5. repeat while the last claim found rows, ``max_run_duration`` allows, and the lock is still
   ours (a pass ends with a claim that finds nothing); after a batch that was not full, wait
   ``linger`` first.

While a full batch is handled, the next batch is already being claimed on a second connection and
the batch's outcome is written on a third while the next one is built (pipelining; only with
backoffs long enough that a row in flight for two batch cycles cannot become due again). A batch
claimed ahead when the pass ends (stop, ``max_run_duration``) is released. The pass keeps its
connections until it ends: the pool's reset query on every release would cost a round trip per
statement.

No exception from one row reaches another; an unexpected error in building or publishing marks
the affected rows for retry (bounded by ``max_attempts``) and the pass goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TypeVar
from uuid import UUID, uuid4

import structlog
from opentelemetry import trace

from realtime_dispatch.database.connections import DbConnection, translate_errors
from realtime_dispatch.delivery.marks import MembershipMark
from realtime_dispatch.delivery.push import HubPublisher, PublishResult, Push
from realtime_dispatch.dispatch.alerts import AlertSink
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.observer import DispatchObserver, PassReport
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.outcome import (
    Errors,
    classify,
    screen,
    sort_published,
    split_built,
)
from realtime_dispatch.dispatch.pipeline import InFlight, Lanes
from realtime_dispatch.dispatch.projections.builder import BuildResults, PayloadBuilder
from realtime_dispatch.errors import (
    DatabaseUnavailable,
    RealtimeDispatchError,
    TransientError,
)
from realtime_dispatch.outbox.backoff import JITTER
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.partitions import WHOLE, Partition
from realtime_dispatch.outbox.store import OutboxStore

__all__ = ["Dispatcher", "PassReport"]

T = TypeVar("T")

_tracer = trace.get_tracer("realtime_dispatch.dispatch")

PUSH_SLICE = 50  # rows handed to the publisher at once; a stop request is honoured between slices
PIPELINE_MIN_BACKOFF = 0.5  # seconds; shortest first backoff for which the pass pipelines
PIPELINE_LANES = 3  # connections a pipelined pass uses: claims, payload queries, outcomes
BUILD_LANES = 2  # more connections a batch's payload statements run on at once (kinds apart)
POOL_SIZE = PIPELINE_LANES + BUILD_LANES + 1
"""The pool a runner needs: its lanes, and one for the membership marks."""
OUTCOME_DELAY = 0.05  # seconds a pushed slice may wait for its outcome while later slices push
PUSH_GRACE = 1.0  # seconds: the least time a pass's first slice gets; and how long past the
# pass's end a publisher runs before it is cut (past MIN_PUSH_TIME, for one that ignores it)


class Dispatcher:
    def __init__(
        self,
        *,
        store: OutboxStore,
        builder: PayloadBuilder,
        publisher: HubPublisher,
        options: RealtimeDispatchOptions,
        metrics: DispatchMetrics,
        alerts: AlertSink,
        partition: Partition = WHOLE,
        observer: DispatchObserver | None = None,
    ) -> None:
        self.partition = partition
        self._store = store
        self._builder = builder
        self._publisher = publisher
        self._options = options
        self._observer = observer or DispatchObserver(metrics, alerts)
        self.mark: MembershipMark | None = None
        """What the claims' connection heard on ``realtime_membership``, when it listens there
        (set by the runner that keeps membership marks): each slice is published with its
        tokens as they are then (at least as recent as the ones the slice's claim saw)."""
        self._stop = asyncio.Event()
        self._flight: InFlight | None = None  # the current pass's rows in flight
        # Pipelining keeps a batch in flight for about two batch cycles instead of one. A row in
        # flight longer than its shortest backoff could be claimed by a second runner (if one
        # ever runs, e.g. while the lock changes hands); with backoffs this short, stay simple.
        self._pipelining = options.backoff_base * (1 - JITTER) >= PIPELINE_MIN_BACKOFF

    @property
    def pipelining(self) -> bool:
        """Whether full batches overlap the next claim (only with long enough backoffs)."""
        return self._pipelining

    @property
    def options(self) -> RealtimeDispatchOptions:
        return self._options

    @property
    def store(self) -> OutboxStore:
        return self._store

    def request_stop(self) -> None:
        """Stop between rows: finish the current slice's outcomes, release what was not pushed."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def release_in_flight(self) -> int:
        """After the runner gave up on a pass (its lease expired): give back the rows it claimed
        and has no outcome for, due at once. An outcome the abandoned pass writes later is
        ignored (the release moves the row_version on)."""
        flight = self._flight
        if flight is None or not flight.rows:
            return 0
        rows = list(flight.rows.values())
        flight.discard(rows)
        return await self._store.release(rows)

    async def run_pass(
        self,
        *,
        still_locked: Callable[[], bool] = lambda: True,
        on_first_claim: Callable[[], object] | None = None,
        claim_conn: DbConnection | None = None,
    ) -> PassReport:
        """One pass. ``still_locked`` tells whether the single-runner lock is still ours;
        ``on_first_claim`` runs once the pass's first claim found rows (the runner clears its
        idle flag there; a coroutine it returns is awaited before the first push).
        ``claim_conn``: the claims (and whatever else runs on lane 0) go on this connection, not
        one from the pool (the runner's own, when it listens for membership changes)."""
        report = PassReport()
        started = time.monotonic()
        job_run_id = str(uuid4())
        with (
            structlog.contextvars.bound_contextvars(job_run_id=job_run_id),
            _tracer.start_as_current_span("realtime_dispatch.pass") as span,
        ):
            span.set_attribute("realtime.job_run_id", job_run_id)
            async with translate_errors(), contextlib.AsyncExitStack() as stack:
                lanes = Lanes(self._store.pool, stack, claim_conn)
                flight = self._flight = InFlight()
                try:
                    await self._batches(
                        report, started, still_locked, lanes, flight, on_first_claim=on_first_claim
                    )
                    await flight.wait()
                finally:
                    await flight.settle()
                    await lanes.settle()
            report.stopped = self._stop.is_set()
            report.duration = time.monotonic() - started
            self._observer.pass_finished(report, span)
        return report

    async def _batches(
        self,
        report: PassReport,
        started: float,
        still_locked: Callable[[], bool],
        lanes: Lanes,
        flight: InFlight,
        *,
        on_first_claim: Callable[[], object] | None,
    ) -> None:
        """Claim → handle, batch after batch. While a full batch is handled, the next claim
        already runs on another connection (and the batch's outcome is written on a third while
        the next batch is built): the database and the payload work overlap."""
        size = self._options.batch_size
        deadline = started + self._options.max_run_duration
        if not self._go_on(report, started, still_locked, first=True):
            return
        lane0 = await lanes.get(0)

        def claim(exclude: Collection[UUID] = ()) -> Awaitable[list[ClaimedRow]]:
            return self._store.claim(
                size,
                conn=lane0,
                exclude=exclude,
                partition=self.partition,
                session=lanes.first_is_session,
            )

        rows = await claim()
        if rows and on_first_claim is not None:
            result = on_first_claim()
            if asyncio.iscoroutine(result):
                # Runs while the first batch is built; done before its first push.
                flight.before_push = asyncio.ensure_future(result)
        ahead: asyncio.Task[list[ClaimedRow]] | None = None
        try:
            while rows:
                report.batches += 1
                report.claimed += len(rows)
                flight.add(rows)
                self._observer.batch_claimed(rows)
                full = len(rows) >= size
                pipelined = (
                    full
                    and self._pipelining
                    and lanes.ready(PIPELINE_LANES)
                    and self._go_on(report, started, still_locked)
                )
                if pipelined:
                    report.pipelined += 1
                    ahead = asyncio.ensure_future(claim(flight.ids))
                elif full and self._pipelining:
                    # This batch runs sequentially; pipelining starts once the lanes are in.
                    lanes.prepare(PIPELINE_LANES)
                await self._handle_batch(
                    lanes, rows, report, flight, pipelined=pipelined, deadline=deadline
                )
                if ahead is None:
                    # Under a steady stream batches are rarely full: claim again under the same
                    # lock (no unlock/lock round trips of a new pass), after a short linger so
                    # that the claim finds a few rows rather than one.
                    if not full and self._options.linger:
                        await asyncio.sleep(self._options.linger)
                    if not self._go_on(report, started, still_locked):
                        break
                    rows = await claim(flight.ids)
                    continue
                rows, ahead = await ahead, None
                if rows and (
                    self._stop.is_set()
                    or time.monotonic() - started >= self._options.max_run_duration
                ):
                    # Claimed ahead, but the pass ends here: give them back, due at once.
                    report.released += await self._store.release(rows, conn=lane0)
                    flight.discard(rows)
                    report.more_waiting = not self._stop.is_set()
                    break
        finally:
            if ahead is not None:  # an error ended the pass while a claim was running
                with contextlib.suppress(Exception):
                    await self._store.release(await ahead, conn=lane0)

    def _go_on(
        self,
        report: PassReport,
        started: float,
        still_locked: Callable[[], bool],
        *,
        first: bool = False,
    ) -> bool:
        """May the pass claim another batch? (Not when stopping, past max_run_duration, or
        when the lock is lost.)"""
        if self._stop.is_set() or report.lost_lock or report.more_waiting:
            return False
        if not first and time.monotonic() - started >= self._options.max_run_duration:
            report.more_waiting = True
            return False
        if not still_locked():
            report.lost_lock = True
            self._observer.lock_lost()
            return False
        return True

    async def _handle_batch(
        self,
        lanes: Lanes,
        rows: Sequence[ClaimedRow],
        report: PassReport,
        flight: InFlight,
        *,
        pipelined: bool,
        deadline: float,
    ) -> None:
        # Lane 0 is busy with the next claim when pipelined; outcomes then go on lane 2 in the
        # background, else they are written on lane 0 before the pass goes on.
        conn = await lanes.get(1 if pipelined else 0)
        outcome_conn = await lanes.get(2) if pipelined else conn
        live, errors = screen(rows, self._options.max_attempts)
        began = time.time_ns()  # each row's span times its build, push and outcome
        built = await self._build(conn, live, lanes)
        await flight.ready_to_push()
        pushes, unbuilt = split_built(live, built)
        errors.update(unbuilt)
        # Rows that failed before any push get their outcome with the first write.
        unwritten = [row for row in rows if row.id in errors]
        unwritten_since: float | None = None

        async def write_unwritten() -> None:
            nonlocal unwritten, unwritten_since
            pending, unwritten, unwritten_since = unwritten, [], None
            await flight.write(
                self._record(outcome_conn, pending, errors, report, flight, began=began),
                background=pipelined,
            )

        offset = 0
        while True:
            until = deadline
            if report.batches == 1 and offset == 0:
                # The pass's first slice is always pushed, so that every pass makes progress.
                until = max(deadline, time.monotonic() + PUSH_GRACE)
            if (self._stop.is_set() or time.monotonic() >= until) and offset < len(pushes):
                # Stopping, or the pass is out of time: the rest is due again at once.
                report.more_waiting = report.more_waiting or not self._stop.is_set()
                rest = [row for row, _ in pushes[offset:]]
                report.released += await self._store.release(rest, conn=conn)
                flight.discard(rest)
                part: list[tuple[ClaimedRow, Push]] = []
            else:
                part = pushes[offset : offset + PUSH_SLICE]
            publishing = self._publish(part, deadline=until)
            if unwritten and unwritten_since is not None and part:
                # The earlier slices' outcomes are written while this one is pushed, once
                # they have waited OUTCOME_DELAY: a slow push never holds them back.
                results = await _meanwhile(
                    publishing, at=unwritten_since + OUTCOME_DELAY, do=write_unwritten
                )
            else:
                results = await publishing
            settled, late, failed = sort_published(part, results)
            errors.update(failed)
            unwritten.extend(settled)
            if late:  # never sent, the pass being out of time: due again at once
                report.more_waiting = report.more_waiting or not self._stop.is_set()
                report.released += await self._store.release(late, conn=conn)
                flight.discard(late)
            offset += len(part)
            last = not part or offset >= len(pushes)
            now = time.monotonic()
            if unwritten_since is None:
                unwritten_since = now
            # Outcomes are written once per batch, or sooner when pushes are slow (a slice's
            # pushes never wait more than OUTCOME_DELAY for their status), or on stop.
            if unwritten and (
                last or self._stop.is_set() or now - unwritten_since >= OUTCOME_DELAY
            ):
                await write_unwritten()
            if last:
                break

    async def _build(
        self, conn: DbConnection, rows: Sequence[ClaimedRow], lanes: Lanes
    ) -> BuildResults:
        """The batch's payloads on ``conn``; a batch of several kind groups runs their
        statements at once on the lanes after the pipeline's (those open: never waits)."""
        if not rows:
            return {}

        def spare(wanted: int) -> Sequence[DbConnection]:
            return lanes.spares(PIPELINE_LANES, min(wanted, BUILD_LANES))

        try:
            return await self._builder.build(conn, rows, spare=spare)
        except Exception as exc:
            # Building failed as a whole (database gone, a builder bug): every row retries,
            # bounded by max_attempts, and the pass continues.
            error: RealtimeDispatchError = (
                exc
                if isinstance(exc, RealtimeDispatchError)
                else TransientError(type(exc).__name__, code="BuildFailed")
            )
            self._observer.build_failed(error, len(rows))
            return dict.fromkeys((row.id for row in rows), _as_retry(error))

    async def _publish(
        self, part: Sequence[tuple[ClaimedRow, Push]], *, deadline: float
    ) -> Sequence[PublishResult]:
        """Push a slice within the pass's ``deadline`` (max_run_duration): the publisher is told
        it (with the membership marks of :attr:`mark`), and one that ignores it is cut
        :data:`PUSH_GRACE` later, its pushes retried like a hub timeout (a cut push may have
        arrived: at least once)."""
        if not part:
            return []
        timeout = asyncio.timeout_at(_loop_time(deadline + PUSH_GRACE))
        marks = () if self.mark is None else self.mark.tokens
        try:
            async with timeout:
                results = await self._publisher.publish(
                    [push for _, push in part], deadline=deadline, marks=marks
                )
        except Exception as exc:
            if timeout.expired():
                error = TransientError("push ran past max_run_duration", code="PassTimeout")
            elif isinstance(exc, TransientError):
                error = exc
            else:
                error = TransientError(type(exc).__name__, code="PublishFailed")
            self._observer.publish_failed(error, len(part))
            return [error] * len(part)
        if len(results) != len(part):
            error = TransientError("publisher returned a wrong result count", code="PublishFailed")
            return [error] * len(part)
        return results

    async def _record(
        self,
        conn: DbConnection,
        rows: Sequence[ClaimedRow],
        errors: Errors,
        report: PassReport,
        flight: InFlight,
        *,
        began: int,
    ) -> None:
        """Decide (pure), tell the observer, write the outcomes in one commit, tell it again.
        Runs as a task of InFlight: it completes even if the pass is stopped or cancelled."""
        if not rows:
            return
        classified = classify(rows, errors, max_attempts=self._options.max_attempts)
        self._observer.decided(classified, began=began)
        written = await self._store.write_outcomes(classified.outcomes(), conn=conn)
        flight.discard(rows)
        await self._observer.written(classified, written, report)


async def _meanwhile(main: Awaitable[T], *, at: float, do: Callable[[], Awaitable[None]]) -> T:
    """``main``'s result; if it is still running at ``at`` (``time.monotonic()``), ``do()``
    runs meanwhile. ``main`` runs as a task owned here: an error in ``do`` or a cancellation
    cancels it (as it would have been, awaited directly)."""
    task = asyncio.ensure_future(main)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, at - time.monotonic()))
        if not done:
            await do()
        return await task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _loop_time(monotonic: float) -> float:
    """A ``time.monotonic()`` instant on the event loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic - time.monotonic())


def _as_retry(error: RealtimeDispatchError) -> RealtimeDispatchError:
    if isinstance(error, DatabaseUnavailable | TransientError):
        return error
    return TransientError(error.describe(), code="BuildFailed")
