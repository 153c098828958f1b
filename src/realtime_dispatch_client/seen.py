"""The ``eventId`` values a client has shown (pure): a bounded memory, oldest forgotten first.

A push and a sync page can carry the same event (at-least-once, and a resume re-reads what
came live since the last sync); the first copy wins, every later one is a duplicate. Messages
are deduped by ``(chatId, seq)`` in their timeline as well, so forgetting an old id costs at
most a repeated signal of another kind, never a doubled message.
"""

from __future__ import annotations

from collections import OrderedDict
from uuid import UUID


class SeenEvents:
    def __init__(self, capacity: int = 20_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._capacity = capacity
        self._ids: OrderedDict[UUID, None] = OrderedDict()

    def first_time(self, event_id: UUID) -> bool:
        """Remember ``event_id``; ``False`` if it was seen already."""
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._ids)
