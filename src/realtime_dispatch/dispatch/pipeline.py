"""The bookkeeping of a pipelined pass (see :mod:`realtime_dispatch.dispatch.dispatcher`): the
pass's pooled connections ("lanes") and the rows in flight with their outcome write."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Coroutine, Iterable
from typing import Any
from uuid import UUID

import asyncpg

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.outbox.model import ClaimedRow


class Lanes:
    """The pass's connections, taken from the pool on first use and given back when the pass ends
    (one per lane: the pool's reset query on every release would cost a round trip each).

    Opening a connection takes milliseconds, far too long to wait while claimed rows are in
    flight (their backoff runs from the claim): the lanes for pipelining are taken in the
    background (:meth:`prepare`), and used once :meth:`ready`."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        stack: contextlib.AsyncExitStack,
        first: DbConnection | None = None,
    ) -> None:
        """``first``: lane 0 (the claims) on this connection rather than one from the pool."""
        self._pool = pool
        self._stack = stack
        self._conns: list[DbConnection] = [] if first is None else [first]
        self.first_is_session = first is not None
        """Lane 0 is the given connection (a session of the runner's own), not a pooled one."""
        self._opening: asyncio.Task[None] | None = None

    async def get(self, lane: int) -> DbConnection:
        while len(self._conns) <= lane:
            self._conns.append(await self._stack.enter_async_context(self._pool.acquire()))
        return self._conns[lane]

    def ready(self, lanes: int) -> bool:
        return len(self._conns) >= lanes and self._opening is None

    def spares(self, first: int, wanted: int) -> list[DbConnection]:
        """Up to ``wanted`` lanes from ``first`` on that are open now (never waits): the
        connections a batch's payload statements may run on beside its own. Fewer than wanted:
        the rest are opened in the background for the next batches, within the pool's size
        less one (kept for whatever else uses the pool: the membership marks)."""
        room = self._pool.get_max_size() - 1 - first
        wanted = min(wanted, room)
        if wanted <= 0:
            return []
        if len(self._conns) < first + wanted:
            self.prepare(first + wanted)
        return self._conns[first : first + wanted]

    def prepare(self, lanes: int) -> None:
        if self._opening is None and len(self._conns) < lanes:
            self._opening = asyncio.ensure_future(self._open(lanes))

    async def _open(self, lanes: int) -> None:
        try:
            await self.get(lanes - 1)
        finally:
            self._opening = None

    async def settle(self) -> None:
        """Before the connections are given back: let a background acquisition finish."""
        if self._opening is not None:
            with contextlib.suppress(BaseException):
                await self._opening


class InFlight:
    """Rows claimed in this pass whose outcome is not committed yet, and the outcome write in
    progress (one at a time, in order)."""

    def __init__(self) -> None:
        self.rows: dict[UUID, ClaimedRow] = {}
        self._write: asyncio.Task[None] | None = None
        self.before_push: asyncio.Future[Any] | None = None

    async def ready_to_push(self) -> None:
        if self.before_push is not None:
            hook, self.before_push = self.before_push, None
            await hook

    @property
    def ids(self) -> Collection[UUID]:
        return self.rows.keys()

    def add(self, rows: Iterable[ClaimedRow]) -> None:
        self.rows.update((row.id, row) for row in rows)

    def discard(self, rows: Iterable[ClaimedRow]) -> None:
        for row in rows:
            self.rows.pop(row.id, None)

    async def write(self, record: Coroutine[Any, Any, None], *, background: bool) -> None:
        """Start ``record`` once the previous write is done; wait for it unless ``background``.
        A write runs as a task, so that a stop or a cancellation never interrupts it."""
        await self.wait()
        self._write = asyncio.ensure_future(record)
        if not background:
            await self.wait()

    async def wait(self) -> None:
        if self._write is not None:
            await asyncio.shield(self._write)
            self._write = None

    async def settle(self) -> None:
        """On the way out (error or cancellation): let the work in progress finish."""
        hook, self.before_push = self.before_push, None
        if hook is not None:
            with contextlib.suppress(BaseException):
                await hook
        write, self._write = self._write, None
        if write is not None:
            with contextlib.suppress(BaseException):
                await write
