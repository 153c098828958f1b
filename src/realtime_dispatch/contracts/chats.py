"""Chat payloads on the wire: ``read_receipt_updated`` and ``chat_updated`` (to
``chat:{chatId}``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import KeyId, PushPayload


class ReadReceiptUpdated(PushPayload):
    chat_id: KeyId
    user_id: KeyId
    last_read_seq: int
    read_at: datetime


class ChatUpdated(PushPayload):
    """``eventId`` (required here since the first version) is the outbox row, which the
    reference messenger writes with the chat event's own id; ``chatEventId`` names the chat
    event whatever the writer did."""

    chat_id: KeyId
    event_id: UUID
    chat_event_id: KeyId | None = None
    event_kind: str
    actor_user_id: KeyId | None = None
    subject_user_id: KeyId | None = None
    occurred_at: datetime
