"""The call-timeout reaper: a call still ringing after the ring timeout becomes ``Missed``, with
a ``CallMissed`` push to both parties in the same transaction (the gap the spec names: a reaper
that pushed ``call_missed`` without an outbox row); an ``Active`` call answered longer ago than
the maximum call duration (its parties are gone without hanging up, or it was forgotten) becomes
``Ended`` (nobody ended it: ``ended_by_user_id`` null), with a ``CallEnded`` push to both.

:func:`reap_unanswered_calls` and :func:`reap_overlong_calls` do one bounded batch each; the
job that runs them (:mod:`realtime_dispatch.messenger.jobs.call_reaper`, in ``serve`` and
``hub`` beside the media lifecycle jobs) has the timeouts ``REALTIME_CALL_RING_TIMEOUT`` and
``REALTIME_CALL_MAX_DURATION``. Rows are taken with ``FOR UPDATE SKIP LOCKED``, so a sweep
racing an answer or a hang-up never double-ends a call.
"""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.sessions import direct_intents
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind

CALL_RING_TIMEOUT_SECONDS = 45.0
CALL_MAX_DURATION_SECONDS = 4 * 3600.0
REAPER_BATCH = 500


def _timed_out(status: str, since: str, becomes: str) -> str:
    """Up to $2 calls in ``status`` whose ``since`` is more than $1 seconds ago, oldest first,
    locked (a call an answer or a hang-up holds is skipped), set to ``becomes``: their ids and
    parties. Only this module's constants are formatted in; the values are bound."""
    return f"""
UPDATE messenger.call_sessions c
SET {becomes}
WHERE c.id IN (
    SELECT id FROM messenger.call_sessions
    WHERE status = '{status}' AND {since} <= now() - make_interval(secs => $1)
    ORDER BY {since}
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING c.id, c.caller_user_id, c.callee_user_id
"""


_REAP_SQL = _timed_out("Ringing", "created_at", "status = 'Missed', ended_at = now()")
_END_SQL = _timed_out(
    "Active", "answered_at", "status = 'Ended', ended_at = now(), ended_by_user_id = NULL"
)


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
