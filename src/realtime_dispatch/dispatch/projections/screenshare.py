"""Screen share rows → payloads; the audience follows the session kind as for recordings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from realtime_dispatch.contracts.screenshare import (
    ScreenShareStarted,
    ScreenShareStopped,
)
from realtime_dispatch.dispatch.projections.projection import SessionRecordBuilder, SessionStep
from realtime_dispatch.outbox.model import RealtimeDispatchKind

K = RealtimeDispatchKind


class ScreenSharePayloadBuilder(SessionRecordBuilder):
    entity = "ScreenShare"
    query = "screen_shares"
    record_id = "screen_share_id"
    user_field = "user_id"
    steps: ClassVar[Mapping[RealtimeDispatchKind, SessionStep]] = {
        K.SCREEN_SHARE_STARTED: SessionStep(ScreenShareStarted, "started_at"),
        K.SCREEN_SHARE_STOPPED: SessionStep(
            ScreenShareStopped, "stopped_at", "screen share not stopped", "NotStopped"
        ),
    }
