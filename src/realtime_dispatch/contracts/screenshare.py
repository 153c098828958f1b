"""Screen share payloads on the wire: who shares, in which session, since when."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, SessionPayload


class _ScreenShareEvent(SessionPayload):
    screen_share_id: KeyId
    user_id: KeyId


class ScreenShareStarted(_ScreenShareEvent):
    started_at: datetime


class ScreenShareStopped(_ScreenShareEvent):
    stopped_at: datetime
