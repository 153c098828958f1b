"""When each connection's token expires: :class:`ExpiryQueue`, a heap of connection ids by
``exp`` (pure), and :class:`ExpiryTimer`, the one event-loop timer the hub arms for its earliest
entry.

Entries are removed lazily: :meth:`discard` forgets a connection at once, and its heap entry is
skipped when it comes up, or dropped when the heap is rebuilt (once it holds more than twice the
live entries), so connections that come and go with long-lived tokens do not pile up.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Callable


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


class ExpiryTimer:
    """An :class:`ExpiryQueue` and one event-loop timer at its earliest entry: when it fires,
    or when :meth:`run_due` is called because the fan-out saw ``queue.next_at`` pass,
    ``on_due(connection_id, now)`` is called for every connection whose token expired."""

    __slots__ = ("_armed_at", "_on_due", "_timer", "queue")

    def __init__(self, on_due: Callable[[str, float], None]) -> None:
        self.queue = ExpiryQueue()
        self._on_due = on_due
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def track(self, connection_id: str, expires_at: float) -> None:
        self.queue.add(connection_id, expires_at)
        self._arm()

    def forget(self, connection_id: str) -> None:
        self.queue.discard(connection_id)

    def run_due(self) -> None:
        self._timer = None
        self._armed_at = math.inf
        now = time.time()
        for connection_id in self.queue.pop_due(now):
            self._on_due(connection_id, now)
        self._arm()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_at = math.inf

    def _arm(self) -> None:
        due = self.queue.next_at
        if self._timer is not None and due >= self._armed_at:
            return  # armed at or before it: that run re-arms
        self.cancel()
        if due == math.inf:
            return
        self._armed_at = due
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, due - time.time()), self.run_due)
