"""Screen share payloads on the wire: who shares, in which session, since when."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, PushPayload


class _ScreenShareEvent(PushPayload):
    screen_share_id: KeyId
    session_kind: str
    call_id: KeyId | None = None
    conference_id: KeyId | None = None
    chat_id: KeyId | None = None
    user_id: KeyId


class ScreenShareStarted(_ScreenShareEvent):
    started_at: datetime


class ScreenShareStopped(_ScreenShareEvent):
    stopped_at: datetime
