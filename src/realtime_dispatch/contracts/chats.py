"""Chat payloads on the wire: ``read_receipt_updated`` and ``chat_updated`` (to
``chat:{chatId}``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import Contract


class ReadReceiptUpdated(Contract):
    chat_id: UUID
    user_id: UUID
    last_read_seq: int
    read_at: datetime


class ChatUpdated(Contract):
    chat_id: UUID
    event_id: UUID
    event_kind: str
    actor_user_id: UUID | None = None
    subject_user_id: UUID | None = None
    occurred_at: datetime
