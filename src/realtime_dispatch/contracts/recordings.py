"""Recording payloads on the wire: ids, status, times and, when available, where to fetch
the recording."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, PushPayload


class _RecordingEvent(PushPayload):
    recording_id: KeyId
    session_kind: str
    call_id: KeyId | None = None
    conference_id: KeyId | None = None
    chat_id: KeyId | None = None
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
