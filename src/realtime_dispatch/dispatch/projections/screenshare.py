"""Screen share rows → payloads; the audience follows the session kind as for recordings."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.contracts.screenshare import (
    ScreenShareStarted,
    ScreenShareStopped,
)
from realtime_dispatch.dispatch.projections.encoding import Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    require,
    require_session,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind

K = RealtimeDispatchKind


class ScreenSharePayloadBuilder(RefProjectionBuilder):
    kinds = frozenset({K.SCREEN_SHARE_STARTED, K.SCREEN_SHARE_STOPPED})
    entity = "ScreenShare"
    query = "screen_shares"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_session(intent, record)
        common = {
            "screen_share_id": record["id"],
            "session_kind": record["session_kind"],
            "call_id": record["call_id"],
            "conference_id": record["conference_id"],
            "chat_id": record["chat_id"],
            "user_id": record["user_id"],
        }
        if intent.kind is K.SCREEN_SHARE_STARTED:
            return ScreenShareStarted, dict(**common, started_at=record["started_at"])
        require(record["stopped_at"] is not None, "screen share not stopped", "NotStopped")
        return ScreenShareStopped, dict(**common, stopped_at=record["stopped_at"])
