"""Recording rows → payloads. The session kind picks the audience: ``Direct`` → ``user:`` of a
party of the call, ``Conference`` → ``chat:`` of the recorded conference."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.contracts.recordings import (
    RecordingAvailable,
    RecordingFailed,
    RecordingStarted,
    RecordingStopped,
)
from realtime_dispatch.dispatch.projections.encoding import Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    require,
    require_session,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind

K = RealtimeDispatchKind


class RecordingPayloadBuilder(RefProjectionBuilder):
    kinds = frozenset(
        {K.RECORDING_STARTED, K.RECORDING_STOPPED, K.RECORDING_AVAILABLE, K.RECORDING_FAILED}
    )
    entity = "Recording"
    query = "recordings"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_session(intent, record)
        common = {
            "recording_id": record["id"],
            "session_kind": record["session_kind"],
            "call_id": record["call_id"],
            "conference_id": record["conference_id"],
            "chat_id": record["chat_id"],
            "started_by_user_id": record["started_by_user_id"],
        }
        kind = intent.kind
        if kind is K.RECORDING_STARTED:
            return RecordingStarted, dict(**common, started_at=record["started_at"])
        if kind is K.RECORDING_STOPPED:
            require(record["stopped_at"] is not None, "recording not stopped", "NotStopped")
            return RecordingStopped, dict(**common, stopped_at=record["stopped_at"])
        if kind is K.RECORDING_AVAILABLE:
            require(record["available_at"] is not None, "recording not available", "NotAvailable")
            return RecordingAvailable, dict(**common, available_at=record["available_at"])
        require(record["failed_at"] is not None, "recording did not fail", "NotFailed")
        return RecordingFailed, dict(
            **common, failed_at=record["failed_at"], failure_code=record["failure_code"]
        )
