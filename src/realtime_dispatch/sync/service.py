"""One page of ``GET /api/sync``: the caller's events after a cursor, built by the same payload
builders the dispatcher pushes with (injected: this package never imports ``dispatch``).

Paging: a full page continues from its last row; a page shorter than ``limit`` is the last one
for now, and moves the cursor to the horizon, so an idle caller's cursor keeps up with the log.
Past what is retained (or a cursor from another database) the answer is empty, ``limited``,
with a cursor at the horizon to continue from after the client's full resync.

Held back: a row is served only below the snapshot's xmin horizon, where no transaction can
still commit, so that a late commit never falls behind a cursor. A transaction that stays
open holds newer rows back; the page then says ``heldBack`` and the client asks again shortly
(its live pushes keep coming meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

import asyncpg
import orjson

from realtime_dispatch.database import DbConnection, translate_errors
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.push import Push
from realtime_dispatch.sync import store
from realtime_dispatch.sync.cursor import SyncCursor, parse_cursor

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class PayloadSource(Protocol):
    """What builds a push per row (the dispatcher's ``CompositePayloadBuilder`` is one)."""

    async def build(
        self, conn: DbConnection, rows: Sequence[ClaimedRow]
    ) -> Mapping[UUID, Push | RealtimeDispatchError]: ...


@dataclass(frozen=True, slots=True)
class SyncEvent:
    event_id: UUID
    target: str
    payload_json: bytes


@dataclass(frozen=True, slots=True)
class SyncPage:
    events: Sequence[SyncEvent]
    next_cursor: str
    limited: bool
    held_back: bool = False

    def json(self) -> bytes:
        """The response body; each payload's JSON goes in as it was built."""
        return orjson.dumps(
            {
                "events": [
                    {
                        "eventId": str(e.event_id),
                        "target": e.target,
                        "payload": orjson.Fragment(e.payload_json),
                    }
                    for e in self.events
                ],
                "nextCursor": self.next_cursor,
                "limited": self.limited,
                "heldBack": self.held_back,
            }
        )


class SyncService:
    def __init__(self, pool: asyncpg.Pool, builder: PayloadSource) -> None:
        self._pool = pool
        self._builder = builder
        self._source: str | None = None

    async def page(self, user_id: UUID, since: str | None, limit: int = DEFAULT_LIMIT) -> SyncPage:
        """Raises :class:`~realtime_dispatch.sync.cursor.CursorError` for a malformed ``since``
        (before touching the database), ``ValueError`` for a limit outside 1..1000."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit: 1 to {MAX_LIMIT}")
        cursor = parse_cursor(since) if since is not None else None
        async with translate_errors(), self._pool.acquire() as conn:
            source = self._source or await self._load_source(conn)
            if cursor is None:
                return SyncPage(
                    (), SyncCursor.at_horizon(source, await store.horizon(conn)).encode(), False
                )
            if cursor.source != source:
                horizon = await store.horizon(conn)
                return SyncPage((), SyncCursor.at_horizon(source, horizon).encode(), True)
            events: list[SyncEvent] = []
            position = cursor
            while True:
                want = limit - len(events)
                found = await store.page(conn, user_id, position.xid, position.after_id, want)
                at_horizon = SyncCursor.at_horizon(source, found.horizon)
                if found.limited:
                    return SyncPage((), at_horizon.encode(), True)
                events += await self._build(conn, [row for _, row in found.rows])
                if len(found.rows) < want:  # the end: continue from the horizon next time
                    end = max(position, at_horizon).encode()
                    return SyncPage(events, end, False, found.held_back)
                xid, last = found.rows[-1]
                position = SyncCursor(xid, last.id, source)
                if len(events) == limit:
                    return SyncPage(events, position.encode(), False)
                # Some rows could not be built (their entity is gone): fill the page, so that
                # a page shorter than ``limit`` always means "nothing more for now".

    async def _build(self, conn: DbConnection, rows: list[ClaimedRow]) -> list[SyncEvent]:
        built = await self._builder.build(conn, rows) if rows else {}
        return [
            SyncEvent(row.id, result.target, result.payload_json)
            for row in rows
            if isinstance(result := built.get(row.id), Push)
        ]

    async def _load_source(self, conn: DbConnection) -> str:
        self._source = await store.source(conn)
        return self._source
