"""Recording payloads on the wire: ids, status, times and, when available, where to fetch
the recording."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import PushPayload


class _RecordingEvent(PushPayload):
    recording_id: UUID
    session_kind: str
    call_id: UUID | None = None
    conference_id: UUID | None = None
    chat_id: UUID | None = None
    started_by_user_id: UUID


class RecordingStarted(_RecordingEvent):
    started_at: datetime


class RecordingStopped(_RecordingEvent):
    stopped_at: datetime


class RecordingAvailable(_RecordingEvent):
    available_at: datetime


class RecordingFailed(_RecordingEvent):
    failed_at: datetime
    failure_code: str | None = None
