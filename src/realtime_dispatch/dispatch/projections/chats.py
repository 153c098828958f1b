"""Chat rows → payloads: the participant's current read mark (``ChatUpdated`` reads its columns
as they are: :class:`~.projection.ColumnsBuilder`)."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.contracts.chats import ReadReceiptUpdated
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
