"""The hub's live signals, never persisted and never in ``GET /api/sync``: no ``eventId``.

* ``user_typing``: another member of a chat is typing (``Typing(chatId)``); show it until
  ``expiresAt``.
* ``presence_changed``: a watched user went online or offline (``WatchPresence``); the same
  shape is each entry of ``WatchPresence``'s answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from uuid import UUID

from pydantic import Field

from realtime_dispatch.contracts.base import Contract


class UserTyping(Contract):
    chat_id: UUID | int | str = Field(union_mode="left_to_right")
    """A UUID on the reference messenger; an integer or text on an adopter's keys."""
    user_id: UUID
    expires_at: datetime


class PresenceChanged(Contract):
    user_id: UUID
    online: bool
    last_seen_at: datetime | None = None
    """When the user's last connection closed (``null``: never seen, or not remembered)."""


SIGNAL_MODELS: Mapping[str, type[Contract]] = {
    "user_typing": UserTyping,
    "presence_changed": PresenceChanged,
}
"""Signal name → its payload model."""
