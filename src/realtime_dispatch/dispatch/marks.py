"""A runner's membership marks (:mod:`realtime_dispatch.delivery.marks`): the listener on its
own connection, where its claims run, and the sending of a new mark when it has none.

A mark is sent through the pool (a ``pg_notify``, which a transaction pooler passes on), at
most once per :data:`MIN_INTERVAL` while membership changes keep coming, and every
:data:`~realtime_dispatch.delivery.marks.REFRESH_EVERY` seconds otherwise. It counts once the
runner's own connection hears it; until then the batches carry none and the hubs run their
barrier, so a mark that is lost or late costs round trips, never order.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import structlog

from realtime_dispatch.database.connections import DB_ERRORS
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.delivery.marks import MembershipMark, barrier_payload, new_token

_log = structlog.get_logger(__name__)

MIN_INTERVAL = 0.05
"""Seconds between two marks sent while membership changes keep coming."""

SEND_MARK = "SELECT pg_notify($1, $2)"


class MarkKeeper:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.mark = MembershipMark()
        self._pool = pool
        self._conn: Any = None
        self._wanted = asyncio.Event()

    async def attach(self, conn: Any) -> None:
        """Listen on ``conn``, the runner's new connection (its claims run there)."""
        self.detach()
        await conn.add_listener(MEMBERSHIP_CHANNEL, self._on_notify)
        self._conn = conn
        self._wanted.set()

    def detach(self) -> None:
        """The runner's connection is closing or gone: what it heard no longer counts."""
        self._conn = None
        self.mark.lost()

    def _on_notify(self, conn: object, _pid: int, _channel: str, payload: str) -> None:
        if conn is not self._conn:
            return  # a late callback of a connection already replaced
        self.mark.notified(payload)
        if not self.mark.tokens:
            self._wanted.set()

    async def run(self) -> None:
        """Send marks while the runner runs; cancel to stop. Never raises for the database."""
        refresh = self.mark.refresh_every
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), refresh)
            self._wanted.clear()
            if self._conn is None or not self.mark.due():
                continue
            try:
                payload = barrier_payload(new_token())
                await self._pool.execute(SEND_MARK, MEMBERSHIP_CHANNEL, payload)
            except (*DB_ERRORS, OSError) as exc:
                # The runner's own turns report an outage; the hubs run their barriers meanwhile.
                _log.debug("membership_mark_failed", error=type(exc).__name__)
            await asyncio.sleep(MIN_INTERVAL)
