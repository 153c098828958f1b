"""Recording rows → payloads. The session kind picks the audience: ``Direct`` → ``user:`` of a
party of the call, ``Conference`` → ``chat:`` of the recorded conference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from realtime_dispatch.contracts.recordings import (
    RecordingAvailable,
    RecordingFailed,
    RecordingStarted,
    RecordingStopped,
)
from realtime_dispatch.dispatch.projections.projection import SessionRecordBuilder, SessionStep
from realtime_dispatch.outbox.model import RealtimeDispatchKind

K = RealtimeDispatchKind


class RecordingPayloadBuilder(SessionRecordBuilder):
    entity = "Recording"
    query = "recordings"
    record_id = "recording_id"
    user_field = "started_by_user_id"
    steps: ClassVar[Mapping[RealtimeDispatchKind, SessionStep]] = {
        K.RECORDING_STARTED: SessionStep(RecordingStarted, "started_at"),
        K.RECORDING_STOPPED: SessionStep(
            RecordingStopped, "stopped_at", "recording not stopped", "NotStopped"
        ),
        K.RECORDING_AVAILABLE: SessionStep(
            RecordingAvailable, "available_at", "recording not available", "NotAvailable"
        ),
        K.RECORDING_FAILED: SessionStep(
            RecordingFailed,
            "failed_at",
            "recording did not fail",
            "NotFailed",
            extra=("failure_code",),
        ),
    }
