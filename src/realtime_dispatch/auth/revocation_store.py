"""Revocations in PostgreSQL (``messenger.realtime_revocations``, an outbox migration, so it
exists wherever the outbox does): revoke, lift, list. Every change is announced by the table's
trigger on ``NOTIFY realtime_revocation``, whoever writes it."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.auth.revocations import Revocation
from realtime_dispatch.database.connections import translate_errors
from realtime_dispatch.outbox.queries import load_queries
from realtime_dispatch.values.keys import Key

QUERIES = load_queries("realtime_dispatch.auth")


def _revocation(record: asyncpg.Record) -> Revocation:
    return Revocation(user_id=record["user_id"], revoked_at=record["revoked_at"])


async def revoke(pool: asyncpg.Pool, user_id: Key) -> Revocation:
    """Refuse ``user_id``'s tokens issued until now; their connections close on every hub."""
    async with translate_errors():
        record = await pool.fetchrow(QUERIES["revoke"], user_id)
    assert record is not None
    return _revocation(record)


async def lift(pool: asyncpg.Pool, user_id: Key) -> Revocation | None:
    """Remove ``user_id``'s revocation; the one lifted, or None when there was none."""
    async with translate_errors():
        record = await pool.fetchrow(QUERIES["lift"], user_id)
    return None if record is None else _revocation(record)


async def revocations(pool: asyncpg.Pool) -> list[Revocation]:
    """Every revocation in force, newest first."""
    async with translate_errors():
        return await load_revocations(pool)


async def load_revocations(pool: asyncpg.Pool, *, within: float = 5.0) -> list[Revocation]:
    """:func:`revocations` with the driver's errors as they come (for a listener that retries
    on them)."""
    records = await pool.fetch(QUERIES["revocations"], timeout=within)
    return [_revocation(r) for r in records]
