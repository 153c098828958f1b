"""Screen share payloads on the wire: who shares, in which session, since when."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import PushPayload


class _ScreenShareEvent(PushPayload):
    screen_share_id: UUID
    session_kind: str
    call_id: UUID | None = None
    conference_id: UUID | None = None
    chat_id: UUID | None = None
    user_id: UUID


class ScreenShareStarted(_ScreenShareEvent):
    started_at: datetime


class ScreenShareStopped(_ScreenShareEvent):
    stopped_at: datetime
