"""The call-timeout reaper: a call still ringing after the ring timeout becomes ``Missed``, with
a ``CallMissed`` push to both parties in the same transaction (the gap the spec names: a reaper
that pushed ``call_missed`` without an outbox row); an ``Active`` call answered longer ago than
the maximum call duration (its parties are gone without hanging up, or it was forgotten) becomes
``Ended`` (nobody ended it: ``ended_by_user_id`` null), with a ``CallEnded`` push to both.

:func:`reap_unanswered_calls` and :func:`reap_overlong_calls` do one bounded sweep each;
:class:`CallTimeoutReaper` runs both periodically (``serve`` runs one; the timeouts are
``REALTIME_CALL_RING_TIMEOUT`` and ``REALTIME_CALL_MAX_DURATION``). Rows are taken with
``FOR UPDATE SKIP LOCKED``, so several replicas may run reapers at once without double-reaping.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

import asyncpg
import structlog

from realtime_dispatch.database import DbConnection
from realtime_dispatch.messenger.sessions import direct_intents
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind

log = structlog.get_logger(__name__)

CALL_RING_TIMEOUT_SECONDS = 45.0
CALL_MAX_DURATION_SECONDS = 4 * 3600.0
REAPER_INTERVAL_SECONDS = 5.0
REAPER_BATCH = 500

_REAP_SQL = """
UPDATE messenger.call_sessions c
SET status = 'Missed', ended_at = now()
WHERE c.id IN (
    SELECT id FROM messenger.call_sessions
    WHERE status = 'Ringing' AND created_at <= now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING c.id, c.caller_user_id, c.callee_user_id
"""

_END_SQL = """
UPDATE messenger.call_sessions c
SET status = 'Ended', ended_at = now(), ended_by_user_id = NULL
WHERE c.id IN (
    SELECT id FROM messenger.call_sessions
    WHERE status = 'Active' AND answered_at <= now() - make_interval(secs => $1)
    ORDER BY answered_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING c.id, c.caller_user_id, c.callee_user_id
"""


async def _reap(
    conn: DbConnection, sql: str, kind: RealtimeDispatchKind, older_than: float, limit: int
) -> list[UUID]:
    """One transaction: the status change and both parties' outbox rows together."""
    async with conn.transaction():
        rows = await conn.fetch(sql, float(older_than), limit)
        for r in rows:
            await enqueue(
                conn, *direct_intents(kind, r["id"], r["caller_user_id"], r["callee_user_id"])
            )
    return [r["id"] for r in rows]


async def reap_unanswered_calls(
    conn: DbConnection,
    *,
    ring_timeout: float = CALL_RING_TIMEOUT_SECONDS,
    limit: int = REAPER_BATCH,
) -> list[UUID]:
    """Turn calls ringing for longer than ``ring_timeout`` seconds into missed calls (one
    transaction: status and ``CallMissed`` rows together). Returns the reaped call ids."""
    return await _reap(conn, _REAP_SQL, RealtimeDispatchKind.CALL_MISSED, ring_timeout, limit)


async def reap_overlong_calls(
    conn: DbConnection,
    *,
    max_duration: float = CALL_MAX_DURATION_SECONDS,
    limit: int = REAPER_BATCH,
) -> list[UUID]:
    """End calls answered more than ``max_duration`` seconds ago (status and ``CallEnded``
    rows in one transaction). Returns the ended call ids."""
    return await _reap(conn, _END_SQL, RealtimeDispatchKind.CALL_ENDED, max_duration, limit)


class CallTimeoutReaper:
    """Runs :func:`reap_unanswered_calls` and :func:`reap_overlong_calls` every ``interval``
    seconds until cancelled. A failed sweep is logged (error class only) and retried on the next
    tick; it never ends the loop."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        ring_timeout: float = CALL_RING_TIMEOUT_SECONDS,
        max_duration: float = CALL_MAX_DURATION_SECONDS,
        interval: float = REAPER_INTERVAL_SECONDS,
    ) -> None:
        self._pool = pool
        self.ring_timeout = ring_timeout
        self.max_duration = max_duration
        self.interval = interval

    async def sweep(self) -> list[UUID]:
        """Missed calls of this sweep (see :meth:`sweep_overlong` for ended ones)."""
        async with self._pool.acquire() as conn:
            reaped = await reap_unanswered_calls(conn, ring_timeout=self.ring_timeout)
        if reaped:
            log.info("calls_missed", calls=len(reaped))
        return reaped

    async def sweep_overlong(self) -> list[UUID]:
        async with self._pool.acquire() as conn:
            ended = await reap_overlong_calls(conn, max_duration=self.max_duration)
        if ended:
            log.info("calls_ended_by_reaper", calls=len(ended))
        return ended

    async def run(self) -> None:
        while True:
            try:
                while len(await self.sweep()) >= REAPER_BATCH:
                    pass
                while len(await self.sweep_overlong()) >= REAPER_BATCH:
                    pass
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                log.warning("call_reaper_failed", error=type(exc).__name__)
            await asyncio.sleep(self.interval)
