"""Chat payloads on the wire: ``read_receipt_updated`` and ``chat_updated`` (to
``chat:{chatId}``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import PushPayload


class ReadReceiptUpdated(PushPayload):
    chat_id: UUID
    user_id: UUID
    last_read_seq: int
    read_at: datetime


class ChatUpdated(PushPayload):
    """``eventId`` (required here since the first version) is the outbox row, which the
    reference messenger writes with the chat event's own id; ``chatEventId`` names the chat
    event whatever the writer did."""

    chat_id: UUID
    event_id: UUID
    chat_event_id: UUID | None = None
    event_kind: str
    actor_user_id: UUID | None = None
    subject_user_id: UUID | None = None
    occurred_at: datetime
