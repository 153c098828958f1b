"""When each connection's token expires: :class:`ExpiryQueue`, a heap of connection ids by
``exp``. Pure; the hub arms one timer for the earliest entry and closes what is due.

Entries are removed lazily: :meth:`discard` forgets a connection at once, and its heap entry is
skipped when it comes up, or dropped when the heap is rebuilt (once it holds more than twice the
live entries), so connections that come and go with long-lived tokens do not pile up.
"""

from __future__ import annotations

import heapq
import math


class ExpiryQueue:
    __slots__ = ("_due", "_heap", "next_at")

    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self.next_at = math.inf
        """The earliest expiry (Unix seconds), ``inf`` when empty: a plain attribute, so the
        fan-out can compare against it for the price of one lookup."""

    def __len__(self) -> int:
        return len(self._due)

    def add(self, connection_id: str, expires_at: float) -> None:
        """Track (or move) ``connection_id``'s expiry."""
        self._due[connection_id] = expires_at
        heapq.heappush(self._heap, (expires_at, connection_id))
        self._update()

    def discard(self, connection_id: str) -> None:
        if self._due.pop(connection_id, None) is None:
            return
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(at, cid) for cid, at in self._due.items()]
            heapq.heapify(self._heap)
        self._update()

    def pop_due(self, now: float) -> list[str]:
        """The connections whose token expired at or before ``now``, forgotten here."""
        due: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, connection_id = heapq.heappop(heap)
            if self._due.get(connection_id) == at:
                del self._due[connection_id]
                due.append(connection_id)
        self._update()
        return due

    def _update(self) -> None:
        heap = self._heap
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # a stale entry: discarded or moved since
        self.next_at = heap[0][0] if heap else math.inf
