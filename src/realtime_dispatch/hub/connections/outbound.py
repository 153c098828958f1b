"""A connection's outbound records: the bounded send queue and, under stateful reconnect, the
replay buffer, in one structure. Pure; the connection's writer task drains it.

Every sequenced record gets the next sequence id (1, 2, …). Records before ``_unsent_from`` were
written to a transport; the others wait. Without stateful reconnect a written record is dropped
at once; with it, a record stays until the client acknowledges its id (``Ack``), and
:meth:`Outbound.rewind` makes every unacknowledged record pending again for a new transport.
Control records (pings, acks, sequence, close) are never numbered nor replayed. Without
stateful reconnect, a record written past the queue while nothing waits is not numbered either
(:meth:`Outbound.writes_through`): ids are sent only under stateful reconnect.

Bounds: at most ``max_pending`` records waiting to be written, and (stateful) at most
``max_replay_chars`` bytes kept for replay. :meth:`push` returns False when a bound would be
crossed: the consumer is too slow and the connection is closed rather than growing memory.
"""

from __future__ import annotations

from collections import deque


class Outbound:
    __slots__ = (
        "_chars",
        "_control",
        "_entries",
        "_first_id",
        "_max_pending",
        "_max_replay_chars",
        "_next_id",
        "_unsent_from",
        "stateful",
    )

    def __init__(self, *, stateful: bool, max_pending: int, max_replay_chars: int) -> None:
        self.stateful = stateful
        self._max_pending = max_pending
        self._max_replay_chars = max_replay_chars
        self._entries: deque[bytes] = deque()
        self._first_id = 1  # sequence id of _entries[0]
        self._next_id = 1  # sequence id the next pushed record gets
        self._unsent_from = 1  # first sequence id not yet written
        self._chars = 0
        self._control: list[bytes] = []

    @property
    def pending(self) -> int:
        return self._next_id - self._unsent_from

    def has_pending(self) -> bool:
        return bool(self._control) or self._next_id > self._unsent_from

    def push(self, record: bytes) -> bool:
        """Queue a sequenced record; False when the consumer is too slow (nothing queued)."""
        if self._next_id - self._unsent_from >= self._max_pending:
            return False
        if self.stateful:
            if self._chars + len(record) > self._max_replay_chars:
                return False
            self._chars += len(record)
        self._entries.append(record)
        self._next_id += 1
        return True

    def push_written(self, record: bytes) -> bool:
        """:meth:`push` for a record the caller writes at once (nothing was pending)."""
        if not self.stateful:
            return self.push_written_run(1)
        if not self.push(record):
            return False
        self._unsent_from = self._next_id
        return True

    def push_written_run(self, count: int) -> bool:
        """:meth:`push_written` for ``count`` records without stateful reconnect: they are only
        numbered, since nothing is kept for replay."""
        if self.stateful:
            raise ValueError("a stateful connection keeps each record: use push_written")
        if self._next_id - self._unsent_from >= self._max_pending:
            return False
        self._next_id += count
        self._unsent_from = self._first_id = self._next_id
        return True

    def writes_through(self) -> bool:
        """True when a record may be written past the queue, at once and unnumbered: nothing
        waits (no record, no control record), nothing is kept for replay and the bound takes
        one. Without stateful reconnect sequence ids are never sent, so a record written
        while nothing waits needs no number: the queue's state is the same as if it had been
        numbered and taken. The connection keeps its direct-write flag by this
        (:meth:`~.connection.HubConnection.refresh`)."""
        return (
            not self.stateful
            and not self._control
            and self._next_id == self._unsent_from
            and self._max_pending > 0
        )

    def push_control(self, record: bytes, *, first: bool = False) -> None:
        """Queue a record to go before any data; ``first``: before the control records queued
        already too (a handshake answer, behind which a close message may wait)."""
        if first:
            self._control.insert(0, record)
        else:
            self._control.append(record)

    def take(self, max_chars: int) -> tuple[list[bytes], int]:
        """Records to write now, control first, up to about ``max_chars`` (at least one).

        Returns them and how many of them are sequenced records.
        """
        batch = self._control
        self._control = []
        size = sum(len(r) for r in batch)
        start = self._unsent_from - self._first_id
        index = start
        end = len(self._entries)
        entries = self._entries
        while index < end and (size < max_chars or index == start):
            record = entries[index]
            batch.append(record)
            size += len(record)
            index += 1
        taken = index - start
        self._unsent_from += taken
        if not self.stateful:
            for _ in range(taken):
                entries.popleft()
            self._first_id += taken
        return batch, taken

    def take_control(self) -> list[bytes]:
        batch = self._control
        self._control = []
        return batch

    def ack(self, sequence_id: int) -> None:
        """The client has every record up to ``sequence_id``; forget them."""
        upto = min(sequence_id, self._unsent_from - 1)
        while self._first_id <= upto:
            self._chars -= len(self._entries.popleft())
            self._first_id += 1

    def rewind(self) -> int:
        """A new transport: every unacknowledged record is pending again.

        Returns the sequence id to announce in the ``Sequence`` message. Control records queued
        for the old transport are dropped.
        """
        self._control = []
        self._unsent_from = self._first_id
        return self._first_id
