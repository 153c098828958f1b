"""What the dispatcher reports, apart from what it decides: the pass's counts
(:class:`PassReport`), logs, metrics, trace spans and quarantine alerts.

:mod:`.outcome` decides (pure); :class:`DispatchObserver` is told what was decided and what was
written, and does every side effect that is not the database: metric and log names are those of
the spec and of ``docs/reference.md``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import structlog
from opentelemetry import trace

from realtime_dispatch.dispatch.alerts import AlertSink, RealtimeDispatchQuarantinedEvent
from realtime_dispatch.dispatch.metrics import DispatchMetrics, observe_all
from realtime_dispatch.dispatch.outcome import Classification, Decided, Verdict
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.store import WrittenOutcomes

_log = structlog.get_logger("realtime_dispatch.dispatch.dispatcher")
_tracer = trace.get_tracer("realtime_dispatch.dispatch")


@dataclass
class PassReport:
    batches: int = 0
    claimed: int = 0
    dispatched: int = 0
    retried: int = 0
    quarantined: int = 0
    target_gone: int = 0
    released: int = 0
    superseded: int = 0  # outcomes not written: the row_version moved since the claim
    stopped: bool = False
    lost_lock: bool = False
    more_waiting: bool = False  # ended by max_run_duration while rows were still coming
    pipelined: int = 0  # batches handled while the next claim already ran
    duration: float = 0.0
    lags: list[float] = field(default_factory=list)
    error_codes: Counter[str] = field(default_factory=Counter)  # of rows retried or quarantined

    @property
    def worked(self) -> bool:
        return self.claimed > 0


def _by_kind(rows: Iterable[ClaimedRow]) -> Counter[str]:
    return Counter(row.kind for row in rows)


class DispatchObserver:
    """Logs, counts, traces and alerts for one dispatcher (all of its passes)."""

    def __init__(
        self,
        metrics: DispatchMetrics,
        alerts: AlertSink,
        *,
        unminted: frozenset[str] = frozenset(),
    ) -> None:
        """``unminted``: the invite kinds this process delivers without a media join (no media
        secret): each one delivered is counted (``messenger_realtime_media_unconfigured``)."""
        self.metrics = metrics
        self.alerts = alerts
        self.unminted = unminted

    # -- the pass -------------------------------------------------------------------------------

    def batch_claimed(self, rows: Sequence[ClaimedRow]) -> None:
        _log.debug("batch_claimed", rows=len(rows))

    def lock_lost(self) -> None:
        _log.warning("dispatch_lock_lost")

    def build_failed(self, error: RealtimeDispatchError, rows: int) -> None:
        _log.error("payload_build_failed", error=error.describe(), rows=rows)

    def publish_failed(self, error: RealtimeDispatchError, rows: int) -> None:
        _log.error("publish_failed", error=error.describe(), rows=rows)

    def pass_finished(self, report: PassReport, span: trace.Span) -> None:
        span.set_attribute("realtime.claimed", report.claimed)
        span.set_attribute("realtime.dispatched", report.dispatched)
        if report.worked:
            # The spec's per-row events, summed: one line per pass, ids and codes only.
            _log.info(
                "job_completed",
                batches=report.batches,
                claimed=report.claimed,
                dispatched=report.dispatched,
                retried=report.retried,
                quarantined=report.quarantined,
                released=report.released,
                superseded=report.superseded,
                error_codes=dict(report.error_codes),
                duration_ms=round(report.duration * 1000, 2),
            )

    # -- a slice's outcomes ---------------------------------------------------------------------

    def decided(self, classified: Classification, *, began: int) -> None:
        """Before the outcomes are written: one span per row (child of the pass span, from
        ``began``, the batch's start, in ns; only while the pass is being recorded) and the
        per-row ``dispatched`` lines, at debug: one line per delivered row would cost more than
        the delivery itself (docs/reference.md, "Logs")."""
        if trace.get_current_span().is_recording():
            for row in classified.done:
                _row_span(row, Verdict.DONE, began)
            for decided in (*classified.retry, *classified.quarantine, *classified.gone):
                _row_span(decided.row, decided.verdict, began)
        if _log.is_enabled_for(logging.DEBUG):
            for row in classified.done:
                _log.debug(
                    "dispatched",
                    kind=row.kind,
                    chat_id=str(row.chat_id) if row.chat_id is not None else None,
                    target_user_id=str(row.target_user_id)
                    if row.target_user_id is not None
                    else None,
                    seq=row.seq,
                    attempts=row.attempts,
                )

    async def written(
        self, classified: Classification, written: WrittenOutcomes, report: PassReport
    ) -> None:
        """After the outcomes were committed: metrics, the pass's counts, per-row lines and
        quarantine alerts, all of them only for rows whose outcome was written (a row_version
        that moved since the claim wrote nothing: the row is another runner's now)."""
        metrics = self.metrics
        done = [row for row in classified.done if row.id in written.done]
        retried = [d for d in classified.retry if d.row.id in written.retried]
        for kind, count in _by_kind(done).items():
            metrics.dispatched.labels(kind).inc(count)
            if kind in self.unminted:
                metrics.media_unconfigured.labels(kind).inc(count)
        for kind, count in _by_kind(d.row for d in retried).items():
            metrics.retried.labels(kind).inc(count)
        observe_all(metrics.lag, written.done_lags)
        report.error_codes.update(d.error.code for d in retried)
        for d in retried:
            # The spec's per-row line, at the default level: during a hub incident it shows
            # which rows are retrying (ids and codes only, never a payload).
            _log.info(
                "dispatch_retry",
                entry_id=str(d.row.id),
                kind=d.row.kind,
                attempts=d.row.attempts,
                error_code=d.error.code,
            )
        report.lags.extend(written.done_lags)
        report.dispatched += len(done)
        report.retried += len(retried)
        report.quarantined += len(written.quarantined)
        report.target_gone += len(written.gone)
        gone = [d.row for d in classified.gone if d.row.id in written.gone]
        for kind, count in _by_kind(gone).items():
            metrics.target_gone.labels(kind).inc(count)
        for d in classified.quarantine:
            if d.row.id in written.quarantined:
                await self._quarantined(d, report)
        superseded = classified.size - len(done) - len(retried)
        superseded -= len(written.quarantined) + len(written.gone)
        if superseded:
            report.superseded += superseded
            metrics.superseded.inc(superseded)
            _log.info("outcomes_superseded", rows=superseded)

    async def _quarantined(self, d: Decided, report: PassReport) -> None:
        row = d.row
        self.metrics.quarantined.labels(row.kind).inc()
        report.error_codes[d.error.code] += 1
        _log.warning(
            "quarantined",
            entry_id=str(row.id),
            kind=row.kind,
            attempts=row.attempts,
            error_code=d.error.code,
        )
        try:
            await self.alerts.quarantined(
                RealtimeDispatchQuarantinedEvent(
                    outbox_entry_id=row.id,
                    kind=row.kind,
                    chat_id=row.chat_id,
                    attempts=row.attempts,
                    reason=d.error.describe(),
                )
            )
        except Exception as exc:
            _log.error("alert_sink_failed", error=type(exc).__name__)


def _row_span(row: ClaimedRow, verdict: Verdict, began: int) -> None:
    span = _tracer.start_span("realtime_dispatch.row", start_time=began)
    if span.is_recording():
        span.set_attribute("realtime.kind", row.kind)
        span.set_attribute("realtime.outbox_id", str(row.id))
        if row.chat_id:
            span.set_attribute("realtime.chat_id", str(row.chat_id))
        # What joins the span to the owner's write (the spec's RefId, CreatedAt): the row's
        # reference, its message where it has one, and when the transaction wrote it.
        if row.ref_id is not None:
            span.set_attribute("realtime.ref_id", str(row.ref_id))
        if row.message_id is not None:
            span.set_attribute("realtime.message_id", str(row.message_id))
        span.set_attribute("realtime.created_at", row.created_at.isoformat())
        span.set_attribute("realtime.verdict", verdict.value)
    span.end()
