"""The hub's live signals, never persisted and never in ``GET /api/sync``: no ``eventId``.

* ``user_typing``: another member of a chat is typing (``Typing(chatId)``); show it until
  ``expiresAt``.
* ``presence_changed``: a watched user went online or offline (``WatchPresence``); the same
  shape is each entry of ``WatchPresence``'s answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from realtime_dispatch.contracts.base import Contract, KeyId


class UserTyping(Contract):
    chat_id: KeyId
    user_id: KeyId
    expires_at: datetime


class PresenceChanged(Contract):
    user_id: KeyId
    online: bool
    last_seen_at: datetime | None = None
    """When the user's last connection closed (``null``: never seen, or not remembered)."""


SIGNAL_MODELS: Mapping[str, type[Contract]] = {
    "user_typing": UserTyping,
    "presence_changed": PresenceChanged,
}
"""Signal name → its payload model."""
