"""One dispatcher pass: claim → build → push → outcome, batch after batch.

The caller (:mod:`realtime_dispatch.dispatch.runner`) holds the single-runner lock around
:meth:`Dispatcher.run_pass`. Within a pass:

1. claim up to ``batch_size`` due rows (one statement, SKIP LOCKED, attempts pre-incremented,
   backoff set) and commit;
2. build every row's payload (one projection query per kind group);
3. push outside any transaction, slice by slice, checking for a stop request between slices;
   rows never pushed because of a stop are released (due again at once, attempt not counted);
4. write the slice's outcomes in one transaction, each guarded by the row_version of the claim;
5. repeat while the batch was full, ``max_run_duration`` allows, and the lock is still ours.

No exception from one row reaches another; an unexpected error in building or publishing marks
the affected rows for retry (bounded by ``max_attempts``) and the pass goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

import structlog
from opentelemetry import trace

from realtime_dispatch.contracts.builder import BuildResults, PayloadBuilder
from realtime_dispatch.dispatch.alerts import AlertSink, RealtimeDispatchQuarantinedEvent
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.outcome import Verdict, decide, exhausted_before_push
from realtime_dispatch.dispatch.publisher import HubPublisher, PublishResult, Push
from realtime_dispatch.errors import (
    DatabaseUnavailable,
    PayloadBuildError,
    RealtimeDispatchError,
    TransientError,
)
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.store import OutboxStore, Outcomes
from realtime_dispatch.settings import RealtimeDispatchOptions

_log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("realtime_dispatch.dispatch")

PUSH_SLICE = 50  # rows handed to the publisher at once; a stop request is honoured between slices


@dataclass
class PassReport:
    batches: int = 0
    claimed: int = 0
    dispatched: int = 0
    retried: int = 0
    quarantined: int = 0
    released: int = 0
    stopped: bool = False
    lost_lock: bool = False
    more_waiting: bool = False  # ended by max_run_duration after a full batch
    duration: float = 0.0
    lags: list[float] = field(default_factory=list)

    @property
    def worked(self) -> bool:
        return self.claimed > 0


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
        on_first_claim: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._builder = builder
        self._publisher = publisher
        self._options = options
        self._metrics = metrics
        self._alerts = alerts
        self._stop = asyncio.Event()
        self.on_first_claim = on_first_claim

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

    async def run_pass(self, *, still_locked: Callable[[], bool] = lambda: True) -> PassReport:
        report = PassReport()
        started = time.monotonic()
        with _tracer.start_as_current_span("realtime_dispatch.pass") as span:
            while not self._stop.is_set():
                if not still_locked():
                    report.lost_lock = True
                    _log.warning("dispatch_lock_lost")
                    break
                rows = await self._store.claim(self._options.batch_size)
                if not rows:
                    break
                if report.batches == 0 and self.on_first_claim is not None:
                    result = self.on_first_claim()
                    if asyncio.iscoroutine(result):
                        await result
                report.batches += 1
                report.claimed += len(rows)
                _log.debug("batch_claimed", rows=len(rows))
                await self._handle_batch(rows, report)
                if len(rows) < self._options.batch_size:
                    break
                if time.monotonic() - started >= self._options.max_run_duration:
                    report.more_waiting = True
                    break
            report.stopped = self._stop.is_set()
            report.duration = time.monotonic() - started
            span.set_attribute("realtime.claimed", report.claimed)
            span.set_attribute("realtime.dispatched", report.dispatched)
        if report.worked:
            _log.info(
                "job_completed",
                dispatched=report.dispatched,
                retried=report.retried,
                quarantined=report.quarantined,
                released=report.released,
                duration_ms=round(report.duration * 1000, 2),
            )
        return report

    async def _handle_batch(self, rows: Sequence[ClaimedRow], report: PassReport) -> None:
        max_attempts = self._options.max_attempts
        errors: dict[UUID, RealtimeDispatchError] = {}
        live: list[ClaimedRow] = []
        for row in rows:
            if exhausted_before_push(row.attempts, max_attempts):
                errors[row.id] = PayloadBuildError(
                    "attempts exhausted without a recorded outcome", code="AttemptsExhausted"
                )
            else:
                live.append(row)
        built = await self._build(live)
        pushes: list[tuple[ClaimedRow, Push]] = []
        for row in live:
            result = built[row.id]
            if isinstance(result, Push):
                pushes.append((row, result))
            else:
                errors[row.id] = result
        # Rows that failed before any push get their outcome with the first slice.
        pending_errors = [row for row in rows if row.id in errors]
        offset = 0
        while True:
            if self._stop.is_set() and offset < len(pushes):
                report.released += await self._store.release([row for row, _ in pushes[offset:]])
                part: list[tuple[ClaimedRow, Push]] = []
            else:
                part = pushes[offset : offset + PUSH_SLICE]
            results = await self._publish(part)
            for (row, _), published in zip(part, results, strict=True):
                if published is not None:
                    errors[row.id] = published
            await self._record(pending_errors + [row for row, _ in part], errors, report)
            pending_errors = []
            offset += len(part)
            if not part or offset >= len(pushes):
                break

    async def _build(self, rows: Sequence[ClaimedRow]) -> BuildResults:
        if not rows:
            return {}
        try:
            async with self._store.pool.acquire() as conn:
                return await self._builder.build(conn, rows)
        except Exception as exc:
            # Building failed as a whole (database gone, a builder bug): every row retries,
            # bounded by max_attempts, and the pass continues.
            error: RealtimeDispatchError = (
                exc
                if isinstance(exc, RealtimeDispatchError)
                else TransientError(type(exc).__name__, code="BuildFailed")
            )
            _log.error("payload_build_failed", error=error.describe(), rows=len(rows))
            return dict.fromkeys((row.id for row in rows), _as_retry(error))

    async def _publish(self, part: Sequence[tuple[ClaimedRow, Push]]) -> Sequence[PublishResult]:
        if not part:
            return []
        try:
            results = await self._publisher.publish([push for _, push in part])
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, TransientError)
                else TransientError(type(exc).__name__, code="PublishFailed")
            )
            _log.error("publish_failed", error=error.describe(), rows=len(part))
            return [error] * len(part)
        if len(results) != len(part):
            error = TransientError("publisher returned a wrong result count", code="PublishFailed")
            return [error] * len(part)
        return results

    async def _record(
        self,
        rows: Sequence[ClaimedRow],
        errors: dict[UUID, RealtimeDispatchError],
        report: PassReport,
    ) -> None:
        if not rows:
            return
        max_attempts = self._options.max_attempts
        done: list[tuple[UUID, int]] = []
        retry: list[tuple[UUID, int, str]] = []
        quarantine: list[tuple[UUID, int, str]] = []
        by_id = {row.id: row for row in rows}
        for row in rows:
            decision = decide(errors.get(row.id), attempts=row.attempts, max_attempts=max_attempts)
            with _tracer.start_as_current_span("realtime_dispatch.row") as span:
                span.set_attribute("realtime.kind", row.kind)
                span.set_attribute("realtime.outbox_id", str(row.id))
                if row.chat_id:
                    span.set_attribute("realtime.chat_id", str(row.chat_id))
                span.set_attribute("realtime.verdict", decision.verdict.value)
            if decision.verdict is Verdict.DONE:
                done.append((row.id, row.row_version))
                _log.debug(
                    "dispatched",
                    kind=row.kind,
                    chat_id=str(row.chat_id) if row.chat_id else None,
                    target_user_id=str(row.target_user_id) if row.target_user_id else None,
                    seq=row.seq,
                    attempts=row.attempts,
                )
            elif decision.verdict is Verdict.RETRY:
                retry.append((row.id, row.row_version, decision.last_error or ""))
                _log.info(
                    "dispatch_retry",
                    entry_id=str(row.id),
                    kind=row.kind,
                    attempts=row.attempts,
                    error_code=errors[row.id].code,
                )
            else:
                quarantine.append((row.id, row.row_version, decision.last_error or ""))
        # The final status write of a slice must land even if we are being stopped.
        written = await asyncio.shield(
            self._store.write_outcomes(Outcomes(done, retry, quarantine))
        )
        kinds_done = {row_id for row_id, _ in done}
        for row_id in kinds_done:
            self._metrics.dispatched.labels(by_id[row_id].kind).inc()
        for row_id, _, _ in retry:
            self._metrics.retried.labels(by_id[row_id].kind).inc()
        for lag in written.done_lags:
            self._metrics.lag.observe(lag)
        report.lags.extend(written.done_lags)
        report.dispatched += len(written.done_lags)
        report.retried += written.retried
        report.quarantined += len(written.quarantined)
        for row_id in written.quarantined:
            row = by_id[row_id]
            self._metrics.quarantined.labels(row.kind).inc()
            _log.warning(
                "quarantined", entry_id=str(row.id), kind=row.kind, error_code=errors[row.id].code
            )
            try:
                await self._alerts.quarantined(
                    RealtimeDispatchQuarantinedEvent(
                        outbox_entry_id=row.id,
                        kind=row.kind,
                        chat_id=row.chat_id,
                        attempts=row.attempts,
                        reason=errors[row.id].describe(),
                    )
                )
            except Exception as exc:
                _log.error("alert_sink_failed", error=type(exc).__name__)


def _as_retry(error: RealtimeDispatchError) -> RealtimeDispatchError:
    if isinstance(error, DatabaseUnavailable | TransientError):
        return error
    return TransientError(error.describe(), code="BuildFailed")
