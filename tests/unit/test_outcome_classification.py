"""The dispatcher's outcome classification, without a database: from build and publish results
to each row's verdict and the status writes; and the observer that reports them (a real
Prometheus registry and a recording alert sink, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from prometheus_client import CollectorRegistry

from realtime_dispatch.delivery.push import NotPushed, Push
from realtime_dispatch.dispatch.alerts import RealtimeDispatchQuarantinedEvent
from realtime_dispatch.dispatch.metrics import DispatchMetrics, observe_all
from realtime_dispatch.dispatch.observer import DispatchObserver, PassReport
from realtime_dispatch.dispatch.outcome import (
    Verdict,
    classify,
    screen,
    sort_published,
    split_built,
)
from realtime_dispatch.errors import (
    HubUnavailable,
    PayloadBuildError,
    PushRejected,
    TargetGone,
)
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.store import WrittenOutcomes

MAX = 3


def _row(attempts: int = 1, kind: str = "MessageReceived") -> ClaimedRow:
    return ClaimedRow(
        id=uuid4(),
        kind=kind,
        target_kind="ChatGroup",
        chat_id=uuid4(),
        target_user_id=None,
        message_id=uuid4(),
        ref_id=None,
        session_kind=None,
        seq=1,
        attempts=attempts,
        row_version=attempts + 1,
        created_at=datetime.now(UTC),
    )


def _push(row: ClaimedRow) -> Push:
    return Push(f"chat:{row.chat_id}", "message_received", payload_json=b"{}")


def test_a_batch_from_claim_to_status_writes() -> None:
    ok, unbuilt, exhausted, rejected, down, last_try, late, gone = rows = [
        _row(),
        _row(),
        _row(attempts=MAX + 1),
        _row(),
        _row(),
        _row(attempts=MAX),
        _row(),
        _row(),
    ]
    live, errors = screen(rows, MAX)
    assert exhausted not in live
    assert errors[exhausted.id].code == "AttemptsExhausted"

    built = {row.id: _push(row) for row in live}
    built[unbuilt.id] = PayloadBuildError("no such message", code="MessageNotFound")
    built[gone.id] = TargetGone("chat deleted", code="ChatGone")
    pushes, not_built = split_built(live, built)
    errors.update(not_built)
    assert [row for row, _ in pushes] == [ok, rejected, down, last_try, late]

    results = [
        None,
        PushRejected("hub answered 400", code="Http400"),
        HubUnavailable("down", code="Unreachable"),
        HubUnavailable("down", code="Unreachable"),
        NotPushed("the pass ran out of time"),
    ]
    settled, given_back, failed = sort_published(pushes, results)
    errors.update(failed)
    assert given_back == [late]
    assert late.id not in errors

    classified = classify([*settled, unbuilt, exhausted, gone], errors, max_attempts=MAX)
    assert classified.done == [ok]
    assert [d.row for d in classified.retry] == [down]
    assert {d.row.id for d in classified.quarantine} == {
        rejected.id,
        last_try.id,
        unbuilt.id,
        exhausted.id,
    }
    assert [d.row for d in classified.gone] == [gone]
    assert all(d.verdict is Verdict.QUARANTINE for d in classified.quarantine)

    outcomes = classified.outcomes()
    assert outcomes.done == [(ok.id, ok.row_version)]
    assert outcomes.retry == [(down.id, down.row_version, "HubUnavailable:Unreachable: down")]
    assert {entry[0] for entry in outcomes.quarantine} == {
        rejected.id,
        last_try.id,
        unbuilt.id,
        exhausted.id,
    }
    assert outcomes.gone[0][:2] == (gone.id, gone.row_version)


def test_a_successful_slice_has_only_done_rows() -> None:
    rows = [_row() for _ in range(3)]
    classified = classify(rows, {}, max_attempts=MAX)
    assert classified.done == rows
    assert (classified.retry, classified.quarantine, classified.gone) == ([], [], [])


class RecordingAlerts:
    def __init__(self) -> None:
        self.events: list[RealtimeDispatchQuarantinedEvent] = []

    async def quarantined(self, event: RealtimeDispatchQuarantinedEvent) -> None:
        self.events.append(event)


async def test_the_observer_counts_only_what_was_written() -> None:
    registry = CollectorRegistry()
    alerts = RecordingAlerts()
    observer = DispatchObserver(DispatchMetrics(registry), alerts)
    ok, retry, bad, stale = _row(), _row(), _row(), _row()
    stale_done, stale_retry = _row(), _row()
    errors = {
        retry.id: HubUnavailable("down", code="Unreachable"),
        stale_retry.id: HubUnavailable("down", code="Timeout"),
        bad.id: PushRejected("400", code="Http400"),
        stale.id: PushRejected("400", code="Http400"),
    }
    classified = classify(
        [ok, retry, bad, stale, stale_done, stale_retry], errors, max_attempts=MAX
    )
    observer.decided(classified, began=0)
    report = PassReport()
    # The stale rows' row_version moved meanwhile: nothing written for them, nothing counted.
    written = WrittenOutcomes(
        done_lags=[0.25], retried={retry.id}, quarantined={bad.id}, done={ok.id}
    )
    await observer.written(classified, written, report)

    assert (report.dispatched, report.retried, report.quarantined) == (1, 1, 1)
    assert report.superseded == 3
    assert report.error_codes == {"Unreachable": 1, "Http400": 1}
    assert [e.outbox_entry_id for e in alerts.events] == [bad.id]
    labels = {"kind": "MessageReceived"}
    assert registry.get_sample_value("messenger_realtime_dispatched_total", labels) == 1
    assert registry.get_sample_value("messenger_realtime_retried_total", labels) == 1
    assert registry.get_sample_value("messenger_realtime_quarantined_total", labels) == 1
    assert registry.get_sample_value("messenger_realtime_superseded_total") == 3
    assert registry.get_sample_value("messenger_realtime_lag_seconds_count") == 1


def test_observing_a_batch_of_lags_equals_observing_each() -> None:
    lags = [0.0, 0.001, 0.0011, 0.3, 0.5, 7.0, 1e6, 0.25, 0.25]
    batched, each = CollectorRegistry(), CollectorRegistry()
    observe_all(DispatchMetrics(batched).lag, lags)
    one_by_one = DispatchMetrics(each).lag
    for lag in lags:
        one_by_one.observe(lag)

    def samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        return [
            (s.name, s.labels, s.value)
            for metric in registry.collect()
            if metric.name == "messenger_realtime_lag_seconds"
            for s in metric.samples
            if not s.name.endswith("_created")
        ]

    assert samples(batched) == samples(each)
    assert batched.get_sample_value("messenger_realtime_lag_seconds_count") == len(lags)
