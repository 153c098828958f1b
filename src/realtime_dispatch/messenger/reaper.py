"""The call-timeout reaper: a call still ringing after the timeout becomes ``Missed``, with a
``CallMissed`` push to both parties in the same transaction (the gap the spec names: a reaper
that pushed ``call_missed`` without an outbox row).

:func:`reap_unanswered_calls` does one bounded sweep; :class:`CallTimeoutReaper` runs it
periodically (``serve`` runs one). Rows are taken with ``FOR UPDATE SKIP LOCKED``, so several
replicas may run reapers at once without double-reaping.
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


async def reap_unanswered_calls(
    conn: DbConnection,
    *,
    ring_timeout: float = CALL_RING_TIMEOUT_SECONDS,
    limit: int = REAPER_BATCH,
) -> list[UUID]:
    """Turn calls ringing for longer than ``ring_timeout`` seconds into missed calls (one
    transaction: status and ``CallMissed`` rows together). Returns the reaped call ids."""
    async with conn.transaction():
        rows = await conn.fetch(_REAP_SQL, float(ring_timeout), limit)
        for r in rows:
            await enqueue(
                conn,
                *direct_intents(
                    RealtimeDispatchKind.CALL_MISSED,
                    r["id"],
                    r["caller_user_id"],
                    r["callee_user_id"],
                ),
            )
    return [r["id"] for r in rows]


class CallTimeoutReaper:
    """Runs :func:`reap_unanswered_calls` every ``interval`` seconds until cancelled. A failed
    sweep is logged (error class only) and retried on the next tick; it never ends the loop."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        ring_timeout: float = CALL_RING_TIMEOUT_SECONDS,
        interval: float = REAPER_INTERVAL_SECONDS,
    ) -> None:
        self._pool = pool
        self.ring_timeout = ring_timeout
        self.interval = interval

    async def sweep(self) -> list[UUID]:
        async with self._pool.acquire() as conn:
            reaped = await reap_unanswered_calls(conn, ring_timeout=self.ring_timeout)
        if reaped:
            log.info("calls_missed", calls=len(reaped))
        return reaped

    async def run(self) -> None:
        while True:
            try:
                while len(await self.sweep()) >= REAPER_BATCH:
                    pass
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                log.warning("call_reaper_failed", error=type(exc).__name__)
            await asyncio.sleep(self.interval)
