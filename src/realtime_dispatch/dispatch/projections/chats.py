"""Chat rows → payloads: the participant's current read mark, and the chat event."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.contracts.chats import ChatUpdated, ReadReceiptUpdated
from realtime_dispatch.dispatch.projections.encoding import Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    require,
    require_chat,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind


class ReadReceiptBuilder(RefProjectionBuilder):
    """``ref_id`` = the participant row; its current read mark is pushed."""

    kinds = frozenset({RealtimeDispatchKind.READ_RECEIPT_UPDATED})
    entity = "Participant"
    query = "read_receipts"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_chat(intent, record)
        require(record["last_read_at"] is not None, "nothing was read", "NotRead")
        return ReadReceiptUpdated, {
            "chat_id": record["chat_id"],
            "user_id": record["user_id"],
            "last_read_seq": record["last_read_seq"],
            "read_at": record["last_read_at"],
        }


class ChatEventBuilder(RefProjectionBuilder):
    """``ref_id`` = the ``messenger.chat_events`` row."""

    kinds = frozenset({RealtimeDispatchKind.CHAT_UPDATED})
    entity = "ChatEvent"
    query = "chat_events"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_chat(intent, record)
        return ChatUpdated, {
            "chat_id": record["chat_id"],
            "chat_event_id": record["id"],  # eventId is the outbox row's, set by the seam
            "event_kind": record["event_kind"],
            "actor_user_id": record["actor_user_id"],
            "subject_user_id": record["subject_user_id"],
            "occurred_at": record["occurred_at"],
        }
