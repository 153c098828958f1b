"""The dispatcher's schedule: timer + LISTEN wake, the per-pass single-runner lock, retention,
and recovery from a lost database — everything around :meth:`Dispatcher.run_pass`.

One dedicated connection (outside the pool) holds the advisory lock during a pass and LISTENs on
``realtime_outbox`` between passes. NOTIFY is only a hint: the loop waits for the first of wake,
``polling_interval`` or stop, so a lost notification costs at most one interval. If that
connection dies it is reopened on the next turn (and a pass runs at once, since notifications
may have been missed). While PostgreSQL is down the loop backs off (0.1 s doubling, up to 5 s
or the polling interval if shorter, jittered: :mod:`.availability`) and logs one
``database_unavailable`` line when the outage starts and one ``database_available`` when it ends.

Idle flag: owners' inserts notify only while ``messenger.realtime_dispatch_state.idle`` is true,
because a notifying commit serialises all owners. A pass that did work is followed at once by
another; after a pass that found nothing due, the runner sets the flag (waiting out writers that
passed the trigger before it flipped), then checks once more for due rows before it sleeps; the
first claim of a pass that finds work clears it. Under load the flag stays false.

Membership marks (``marks``, for a publisher that carries them): the same connection listens on
``realtime_membership`` too and runs the pass's claims, so what it heard before a claim returned
vouches for the claimed rows (:mod:`realtime_dispatch.delivery.marks`, :mod:`.marks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from realtime_dispatch.database.connections import is_unavailable, translate_errors
from realtime_dispatch.delivery.channels import OUTBOX_CHANNEL
from realtime_dispatch.dispatch.availability import Outage, RunnerState, reconnect_cap
from realtime_dispatch.dispatch.dispatcher import Dispatcher, PassReport
from realtime_dispatch.dispatch.marks import MarkKeeper
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.retention import RetentionPolicy

_log = structlog.get_logger(__name__)

RETENTION_EVERY = 60.0  # seconds between retention sweeps while caught up (at most)
PENDING_REFRESH_EVERY = 1.0  # seconds between backlog counts
LEASE_GRACE = 1.0  # seconds an expired pass gets to unwind before its rows are released

Connect = Callable[[], Awaitable[Any]]


class DispatchRunner:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        connect: Connect,
        metrics: DispatchMetrics,
        marks: bool = False,
    ) -> None:
        """``marks``: keep membership marks for the publisher (see the module's docstring)."""
        self._dispatcher = dispatcher
        self._connect = connect
        self._metrics = metrics
        self._options = dispatcher.options
        self._conn: Any = None
        self._listening = False
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._flag_idle: bool | None = None  # what we last wrote to the idle flag
        self._partition = dispatcher.partition
        # A short retention is swept more often, so the table holds at most ~1.25 × its rows.
        every = min(RETENTION_EVERY, max(1.0, self._options.retention_done / 4))
        self.retention = RetentionPolicy(every=every)
        self.vacuums = 0
        self._vacuum: asyncio.Task[None] | None = None
        self._last_pending_refresh = -PENDING_REFRESH_EVERY
        self._abandoned: set[asyncio.Future[PassReport]] = set()  # passes that ignored a cancel
        self.passes_run = 0
        self.state = RunnerState.STARTING
        self._outage: Outage | None = None
        self.marks = MarkKeeper(dispatcher.store.pool) if marks else None

    @property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher

    def request_stop(self) -> None:
        self._stop.set()
        self._dispatcher.request_stop()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @property
    def listening(self) -> bool:
        return self._listening and self._conn is not None and not self._conn.is_closed()

    async def run(self) -> None:
        """Run until :meth:`request_stop`. Never raises for database or push failures."""
        _log.info("dispatcher_started", **_options_log(self._dispatcher))
        keeper: asyncio.Task[None] | None = None
        if self.marks is not None:
            self._dispatcher.mark = self.marks.mark  # the passes it runs publish with its marks
            keeper = asyncio.create_task(self.marks.run(), name="realtime-membership-marks")
        try:
            while not self._stop.is_set():
                again = await self._turn()
                if again or self._stop.is_set():
                    continue
                if self._outage is not None:
                    # Only a stop ends this wait: a lost connection sets the wake event too, and
                    # waking on it would retry at once, again and again.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), self._outage.next_delay())
                    continue
                # The wake event is cleared when a turn starts, so a notification that arrived
                # during the pass ends this wait at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._options.polling_interval)
        finally:
            self.state = RunnerState.STOPPED
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(BaseException):
                    await keeper
            if self._vacuum is not None:
                self._vacuum.cancel()
                with contextlib.suppress(BaseException):
                    await self._vacuum
            await self._close_connection()
            _log.info("dispatcher_stopped")

    async def _turn(self) -> bool:
        """One scheduling turn; True when another pass should follow at once."""
        # Cleared before the lock is tried, not once it is taken: a standby that never gets the
        # lock would otherwise find the event still set after every turn and never sleep.
        self._wake.clear()
        try:
            await self._ensure_connection()
            report = await self._locked_pass()
            self._reachable(active=report is not None)
            chores = self._partition.index == 0  # whole-outbox chores: once per worker
            if chores:
                await self._refresh_pending()  # also when another runner holds the lock
            if report is None:
                return False
            if chores:
                await self._maybe_retention()
            if report.stopped or report.lost_lock:
                return False
            if report.worked or report.more_waiting:
                return True  # more may be due: the next pass finds out, no extra query
            return await self._go_idle()
        except Exception as exc:
            # A query on a session the server just ended may fail with a driver error that says
            # nothing about why (InternalClientError): a closed session says it.
            lost = self._conn is not None and self._conn.is_closed()
            unavailable = is_unavailable(exc) or lost
            reason = "database_unavailable" if unavailable else type(exc).__name__
            self._metrics.passes.labels("failed").inc()
            self._metrics.errors.labels(reason).inc()
            if unavailable:
                self._unreachable(exc)
                await self._close_connection()
            else:
                self.state = RunnerState.FAILING
                _log.error("dispatch_pass_failed", reason=reason)
            return False

    def _unreachable(self, exc: BaseException) -> None:
        """A turn failed because PostgreSQL cannot be reached: one log line per outage."""
        self.state = RunnerState.UNAVAILABLE
        self._metrics.database_available.set(0)
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        if self._outage is not None:
            self._outage.failed_again()
            _log.debug("database_still_unavailable", error=type(cause).__name__)
            return
        self._outage = Outage(time.monotonic(), reconnect_cap(self._options.polling_interval))
        _log.warning(
            "database_unavailable", error=type(cause).__name__, partition=str(self._partition)
        )

    def _reachable(self, *, active: bool) -> None:
        """A turn reached the database (whether or not it got the lock)."""
        self.state = RunnerState.ACTIVE if active else RunnerState.STANDBY
        self._metrics.database_available.set(1)
        outage, self._outage = self._outage, None
        if outage is not None:
            _log.info(
                "database_available",
                outage_seconds=round(time.monotonic() - outage.started, 3),
                attempts=outage.attempts,
                partition=str(self._partition),
            )

    async def _ensure_connection(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            return
        await self._close_connection()
        async with translate_errors():
            conn = await self._connect()
        self._conn = conn
        self._flag_idle = None
        conn.add_termination_listener(self._on_terminated)
        if self._options.listen:
            async with translate_errors():
                await conn.add_listener(OUTBOX_CHANNEL, self._on_notify)
            self._listening = True
        else:
            # Nobody listens: make sure owners do not pay for notifications.
            await self._set_flag(idle=False)
        if self.marks is not None:
            async with translate_errors():
                await self.marks.attach(conn)
        # During an outage a session may open and its first query fail, attempt after attempt:
        # only database_available says the outage is over.
        log = _log.debug if self._outage is not None else _log.info
        log("dispatcher_connected", listening=self._listening)

    async def _locked_pass(self) -> PassReport | None:
        conn = self._conn
        store = self._dispatcher.store
        if not await store.try_lock(conn, self._partition):
            self._metrics.passes.labels("skipped_locked").inc()
            _log.debug("dispatch_pass_skipped", reason="lock_busy")
            return None
        try:
            report = await self._leased_pass(conn)
            if report is None:
                return None
            self.passes_run += 1
            self._metrics.passes.labels("ran").inc()
            self._metrics.last_pass.set(time.time())
            return report
        finally:
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    await store.unlock(conn, self._partition)

    async def _leased_pass(self, conn: Any) -> PassReport | None:
        """Run a pass for at most ``lock_ttl``: the lock is a lease, not a possession. A pass
        still running then (a hung push, a stuck hub client) loses the lock and its rows, so
        another runner takes over within lock_ttl + polling_interval. None when that happened."""
        task = asyncio.ensure_future(
            self._dispatcher.run_pass(
                still_locked=lambda: not conn.is_closed(),
                on_first_claim=self._mark_busy,
                # Marks vouch only for rows claimed on the connection that heard them.
                claim_conn=conn if self.marks is not None else None,
            )
        )
        try:
            done, _ = await asyncio.wait({task}, timeout=self._options.lock_ttl)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        self._metrics.errors.labels("lease_expired").inc()
        # Closing the session is what drops the advisory lock, whatever the pass is doing.
        await self._close_connection(wait=False)
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._forget)
        await asyncio.wait({task}, timeout=LEASE_GRACE)
        released = await self._dispatcher.release_in_flight()
        _log.error("dispatch_lease_expired", lock_ttl=self._options.lock_ttl, released=released)
        return None

    def _forget(self, task: asyncio.Future[PassReport]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an abandoned pass's error was already accounted for

    async def _mark_busy(self) -> None:
        if self._flag_idle is not False:
            await self._set_flag(idle=False)

    async def _go_idle(self) -> bool:
        """After a pass that found nothing due: set the idle flag (when listening) and check once
        more, so a row committed while the flag flipped is either seen here or notified. True if
        rows are due after all."""
        if not self.listening or self._flag_idle is True:
            return False
        await self._set_flag(idle=True)
        return await self._due_now()

    async def _due_now(self) -> bool:
        return await self._dispatcher.store.due_exists(self._partition)

    async def _set_flag(self, *, idle: bool) -> None:
        await self._dispatcher.store.set_idle_flag(self._partition, idle=idle)
        self._flag_idle = idle

    async def _refresh_pending(self) -> None:
        """The backlog and quarantine gauges, at most once per :data:`PENDING_REFRESH_EVERY` (a
        count is not free, and under load passes follow each other within milliseconds)."""
        now = time.monotonic()
        if now - self._last_pending_refresh < PENDING_REFRESH_EVERY:
            return
        self._last_pending_refresh = now
        self._metrics.pending.set(await self._dispatcher.store.pending_count())
        self._metrics.quarantined_rows.set(await self._dispatcher.store.quarantined_count())

    async def _maybe_retention(self) -> None:
        """Delete old Done rows in adaptive batches, within the policy's time budget."""
        policy = self.retention
        started = time.monotonic()
        if not policy.due(started):
            return
        deadline = started + policy.budget(started)
        total = 0
        caught_up = False
        while not self._stop.is_set():
            limit = policy.batch
            t0 = time.monotonic()
            deleted = await self._dispatcher.store.purge_done(
                older_than=self._options.retention_done, limit=limit
            )
            now = time.monotonic()
            policy.observe(limit, deleted, now - t0)
            total += deleted
            if deleted < limit:
                caught_up = True
                break
            if now >= deadline:
                break
        policy.finish(time.monotonic(), caught_up=caught_up)
        if total:
            self._metrics.purged.inc(total)
            _log.info("retention_purged", rows=total)
        # The statistics may show this sweep's dead versions only by the next sweep.
        await self._maybe_vacuum()

    async def _maybe_vacuum(self) -> None:
        """Start a background VACUUM of the outbox when the purges left more dead row versions
        than live ones (never two at once; dispatch goes on meanwhile)."""
        if self._vacuum is not None and not self._vacuum.done():
            return
        live, dead = await self._dispatcher.store.dead_tuples()
        if self.retention.needs_vacuum(live, dead):
            self._vacuum = asyncio.create_task(self._vacuum_outbox(dead))

    async def _vacuum_outbox(self, dead: int) -> None:
        started = time.monotonic()
        try:
            await self._dispatcher.store.vacuum()
        except Exception as exc:
            _log.warning("outbox_vacuum_failed", error=type(exc).__name__)
            return
        self.vacuums += 1
        _log.info(
            "outbox_vacuumed", dead=dead, duration_ms=round((time.monotonic() - started) * 1000)
        )

    def _on_notify(self, *_: object) -> None:
        self._wake.set()

    def _on_terminated(self, *_: object) -> None:
        self._listening = False
        if self.marks is not None:
            self.marks.detach()
        self._metrics.errors.labels("listener_lost").inc()
        _log.warning("dispatcher_connection_lost")
        self._wake.set()

    async def _close_connection(self, *, wait: bool = True) -> None:
        conn, self._conn = self._conn, None
        self._listening = False
        if self.marks is not None:
            self.marks.detach()
        if conn is not None:
            # Our own close is not a lost connection.
            conn.remove_termination_listener(self._on_terminated)
        if conn is not None and wait and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2)
        elif conn is not None:
            conn.terminate()


def _options_log(dispatcher: Dispatcher) -> dict[str, object]:
    o = dispatcher.options
    return {
        "polling_interval": o.polling_interval,
        "batch_size": o.batch_size,
        "max_run_duration": o.max_run_duration,
        "max_attempts": o.max_attempts,
        "listen": o.listen,
        "linger": o.linger,
        "partition": str(dispatcher.partition),
    }
