"""Quarantine alerts: ``RealtimeDispatchQuarantinedEvent`` to an :class:`AlertSink`, outside any
claim transaction. The default sink writes a warning log line (the counter is counted by the
dispatcher); operators route that line or the metric to their pager."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

import structlog

from realtime_dispatch.values.keys import Key

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RealtimeDispatchQuarantinedEvent:
    outbox_entry_id: UUID
    kind: str
    chat_id: Key | None
    attempts: int
    reason: str | None


class AlertSink(Protocol):
    async def quarantined(self, event: RealtimeDispatchQuarantinedEvent) -> None: ...


class LogAlertSink:
    async def quarantined(self, event: RealtimeDispatchQuarantinedEvent) -> None:
        _log.warning(
            "realtime_dispatch_quarantined",
            outbox_entry_id=str(event.outbox_entry_id),
            kind=event.kind,
            chat_id=str(event.chat_id) if event.chat_id is not None else None,
            attempts=event.attempts,
            reason=event.reason,
        )
