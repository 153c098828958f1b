"""One page of ``GET /api/sync``: the caller's events after a cursor, built by the same payload
builders the dispatcher pushes with (injected: this package never imports ``dispatch``).

Paging: one page examines at most ``scan_limit`` outbox rows, the caller's or not, so that a
cursor far behind (or a log of other users' rows) costs a bounded statement. A full page
continues from its last row; a page that stopped at the scan bound continues from the last row
examined; both say ``more`` (the client asks again at once: such a page may hold fewer events
than ``limit``, or none). Otherwise the page is the last one for now, and moves the cursor to
the horizon, so an idle caller's cursor keeps up with the log. Past what is retained (or a
cursor from another database) the answer is empty, ``limited``, with a cursor at the horizon to
continue from after the client's full resync; never below the retention floor, though: the
horizon is the whole cluster's, and a long transaction elsewhere can hold it below the floor
of an aggressive retention, where the cursor handed back would be limited again (a resync
loop). Every transaction below the floor had ended when the floor was raised (retention
deletes committed rows only), except one still open across the deletion: its rows may then
come live only, not through sync.

Starving nothing: the page runs in a transaction under ``statement_timeout``
(:class:`SyncTimeout` past it), on the pool it is given (``serve`` gives it its own small one,
so REST, the hub's admission and the dispatcher keep theirs), at most ``max_per_user`` pages
of one user run at once (:class:`SyncBusy` past it, answered 429), and pages of anyone go
through two lanes in this process (the others wait their turn, first come first served,
within ``queue_timeout``). Every page first looks at the :data:`TAIL_SCAN` rows after its
cursor, ``2 × max_concurrent`` at once: a cursor near the log's end (a resume, a reconnect
storm's) is answered there. A cursor farther behind, found from the index alone, waits for one
of ``max_concurrent`` turns and examines up to ``scan_limit`` rows: by default half the
machine's cores, so that replays of old cursors, however many users replay, leave the other
half to REST, the hub's admission and the dispatcher (each far page keeps a PostgreSQL backend
busy while it scans), and a storm of resumes never queues behind them.

Whose rows: ``user:{caller}``, and each chat row written while the caller was a member. The
reference messenger's membership is probed by the ``page`` query itself; on an adopter's schema
the manifest's ``member_spans`` gives the memberships, composed into the same statement
(:func:`~realtime_dispatch.sync.store.spans_page`), so either costs one statement per page.

Held back: a row is served only below the snapshot's xmin horizon, where no transaction can
still commit, so that a late commit never falls behind a cursor. A transaction that stays
open holds newer rows back; the page then says ``heldBack`` and the client asks again shortly
(its live pushes keep coming meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

import asyncpg
import orjson

from realtime_dispatch.database.connections import DbConnection, translate_errors
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.sync import store
from realtime_dispatch.sync.cursor import SyncCursor, parse_cursor
from realtime_dispatch.values.keys import Key

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
TAIL_SCAN = 2000
"""Rows a page examines first, in the tail lane: a cursor within this many rows of the log's
end (a client back from a short disconnection, a reconnect storm's) is answered there."""
_BEGIN_SQL = "BEGIN READ ONLY; SET LOCAL statement_timeout = '{}ms'"
"""A page's transaction and its statement timeout, as one simple-protocol batch: one round
trip. ``SET LOCAL`` ends with the transaction, so it also holds through a pooler."""


def default_concurrency() -> int:
    """Sync pages at once in one process, by default: half the machine's cores, at least 1."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """``REALTIME_SYNC_*``: rows examined per page, the page's statement timeout (seconds),
    pages of one user at once, pages of anyone at once (in this process), and how long a page
    may wait for its turn among those (seconds)."""

    scan_limit: int = 10_000
    statement_timeout: float = 2.0
    max_per_user: int = 2
    max_concurrent: int = field(default_factory=default_concurrency)
    queue_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.scan_limit < MAX_LIMIT:
            raise ValueError(f"scan_limit: at least {MAX_LIMIT} (a page's limit)")
        if not self.statement_timeout > 0:
            raise ValueError("statement_timeout: must be positive")
        if self.max_per_user < 1:
            raise ValueError("max_per_user: at least 1")
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent: at least 1")
        if not self.queue_timeout > 0:
            raise ValueError("queue_timeout: must be positive")


class SyncBusy(RealtimeDispatchError):
    """The caller has ``max_per_user`` pages running already (answered 429)."""

    code = "TooManyRequests"


class SyncTimeout(RealtimeDispatchError):
    """The page's statement ran past ``statement_timeout`` (answered 503)."""

    code = "Timeout"


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
    more: bool = False

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
                "more": self.more,
            }
        )


class SyncService:
    def __init__(
        self,
        pool: asyncpg.Pool,
        builder: PayloadSource,
        options: SyncOptions | None = None,
        *,
        page_query: str = store.QUERIES["page"],
    ) -> None:
        """``page_query``: the reference messenger's ``page``, or
        ``store.spans_page(member_spans)`` on an adopter's schema."""
        self._pool = pool
        self._builder = builder
        self.options = options or SyncOptions()
        self.page_query = page_query
        self._running: dict[Key, int] = {}  # user → pages running now
        self._slots = asyncio.Semaphore(self.options.max_concurrent)  # pages of anyone
        # A look at the tail examines at most a fifth of what a far page may (by default):
        # twice as many of them run at once.
        self._tail_slots = asyncio.Semaphore(2 * self.options.max_concurrent)
        self._source: str | None = None

    async def page(self, user_id: Key, since: str | None, limit: int = DEFAULT_LIMIT) -> SyncPage:
        """Raises :class:`~realtime_dispatch.sync.cursor.CursorError` for a malformed ``since``
        (before touching the database), ``ValueError`` for a limit outside 1..1000,
        :class:`SyncBusy` past the per-user bound, :class:`SyncTimeout` past the timeout."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit: 1 to {MAX_LIMIT}")
        cursor = parse_cursor(since) if since is not None else None
        running = self._running.get(user_id, 0)
        if running >= self.options.max_per_user:
            raise SyncBusy(f"at most {self.options.max_per_user} sync pages of a user at once")
        self._running[user_id] = running + 1
        try:
            return await self._page(user_id, cursor, limit)
        finally:
            left = self._running.pop(user_id) - 1
            if left:
                self._running[user_id] = left

    async def _page(self, user_id: Key, cursor: SyncCursor | None, limit: int) -> SyncPage:
        """Two lanes: ``2 × max_concurrent`` looks at the tail, ``max_concurrent`` far pages.
        A page first looks at the :data:`TAIL_SCAN` rows after its cursor (the tail lane); if
        its cursor is farther behind, it waits for a far turn and examines up to
        ``scan_limit`` rows. So a
        storm of resumes near the log's end never queues behind replays of old cursors, and
        those take no more of PostgreSQL than before: a far scan at a time per turn, and a
        look at the tail before each (a fifth of a scan, by default)."""
        scan = self.options.scan_limit
        if scan > TAIL_SCAN:
            async with self._turn(self._tail_slots):
                page = await self._page_in_turn(user_id, cursor, limit, TAIL_SCAN)
            if page is not None:
                return page
        async with self._turn(self._slots):
            page = await self._page_in_turn(user_id, cursor, limit, scan)
        assert page is not None  # a page at the full scan bound always answers
        return page

    @contextlib.asynccontextmanager
    async def _turn(self, slots: asyncio.Semaphore) -> AsyncIterator[None]:
        # The wait for a turn has its own bound: a page queued behind others waits on this
        # server, not on its statement (a storm of cheap pages is not a slow one), and the
        # statement timeout starts with the turn.
        try:
            async with asyncio.timeout(self.options.queue_timeout):
                await slots.acquire()
        except TimeoutError as exc:
            raise SyncTimeout("sync is busy: no turn for this page within the timeout") from exc
        try:
            yield
        finally:
            slots.release()

    async def _page_in_turn(
        self, user_id: Key, cursor: SyncCursor | None, limit: int, scan: int
    ) -> SyncPage | None:
        """The page, examining at most ``scan`` rows; None when ``scan`` is less than the
        scan bound and the cursor is farther behind than ``scan`` rows (the page needs the
        whole bound)."""
        timeout = self.options.statement_timeout
        async with translate_errors():  # what is left: the database unavailable
            try:
                async with self._pool.acquire(timeout=timeout) as conn:
                    # A page that fails leaves its transaction open: the pool's reset on release
                    # rolls it back (every pool's does, the stateless ones' included).
                    await conn.execute(_BEGIN_SQL.format(int(timeout * 1000)))
                    page = await self._read(conn, user_id, cursor, limit, scan)
                    await conn.execute("COMMIT")
                    return page
            except asyncpg.QueryCanceledError as exc:
                raise SyncTimeout("the sync page ran past its statement timeout") from exc
            except TimeoutError as exc:  # no connection of the sync pool came free in time
                raise SyncTimeout(
                    "the sync pool is busy: no connection within the timeout"
                ) from exc

    async def _read(
        self, conn: DbConnection, user_id: Key, cursor: SyncCursor | None, limit: int, scan: int
    ) -> SyncPage | None:
        source = self._source or await self._load_source(conn)
        if cursor is None or cursor.source != source:
            start = SyncCursor.at_horizon(source, *await store.horizon(conn)).encode()
            return SyncPage((), start, cursor is not None)
        look = scan < self.options.scan_limit
        edge = await store.edge(conn, cursor.xid, cursor.after_id, scan) if look else None
        if edge is not None and edge[0] < (await store.horizon(conn))[0]:
            # Farther behind than this look: the page needs the whole bound. Found from the
            # index alone, before the page's probe of the membership per row.
            return None
        found = await store.page(
            conn, user_id, cursor.xid, cursor.after_id, limit, scan, query=self.page_query
        )
        at_horizon = SyncCursor.at_horizon(source, found.horizon)
        if found.limited:
            restart = SyncCursor.at_horizon(source, found.horizon, found.floor)
            return SyncPage((), restart.encode(), True)
        full = len(found.rows) == limit
        if not full and not look:
            edge = await store.edge(conn, cursor.xid, cursor.after_id, scan)
        # Stopped at the scan bound below the horizon: continue after what was examined.
        stopped = not full and edge is not None and edge[0] < found.horizon
        if stopped and look:
            return None  # the horizon moved past the look's end meanwhile
        # Rows that cannot be built (their entity is gone) are left out: a page may hold
        # fewer events than it read rows; ``more`` says whether to ask again at once.
        events = await self._build(conn, [row for _, row in found.rows])
        if full:
            xid, last = found.rows[-1]
            return SyncPage(events, SyncCursor(xid, last.id, source).encode(), False, more=True)
        if stopped:
            assert edge is not None
            return SyncPage(events, SyncCursor(*edge, source).encode(), False, more=True)
        # The end for now: continue from the horizon next time. Held back, too, when rows the
        # scan bound left unexamined wait above the horizon (some may be the caller's).
        end = max(cursor, at_horizon).encode()
        held = found.held_back or (edge is not None and edge[0] >= found.horizon)
        return SyncPage(events, end, False, held)

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
