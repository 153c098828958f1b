"""Message payloads on the wire: ``message_received``, ``message_edited``, ``message_deleted``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from realtime_dispatch.contracts.base import KeyId, PushPayload


class MessageReceived(PushPayload):
    chat_id: KeyId
    message_id: KeyId
    seq: int
    sender_user_id: KeyId | None = None
    kind: str
    sent_at: datetime
    body: str | None = None
    file_meta: dict[str, Any] | None = None
    card_text: str | None = None


class MessageEdited(PushPayload):
    chat_id: KeyId
    message_id: KeyId
    seq: int
    edited_at: datetime
    body: str | None = None
    card_text: str | None = None


class MessageDeleted(PushPayload):
    chat_id: KeyId
    message_id: KeyId
    seq: int
    deleted_at: datetime
