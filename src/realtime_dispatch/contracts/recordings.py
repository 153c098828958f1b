"""Recording payloads on the wire: ids, status, times and, when available, where to fetch
the recording."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, SessionPayload


class _RecordingEvent(SessionPayload):
    recording_id: KeyId
    started_by_user_id: KeyId


class RecordingStarted(_RecordingEvent):
    started_at: datetime


class RecordingStopped(_RecordingEvent):
    stopped_at: datetime


class RecordingAvailable(_RecordingEvent):
    available_at: datetime


class RecordingFailed(_RecordingEvent):
    failed_at: datetime
    failure_code: str | None = None
