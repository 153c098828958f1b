"""Helpers that put the outbox into operator-relevant states."""

from __future__ import annotations

from uuid import UUID

import asyncpg


async def quarantine_rows(pool: asyncpg.Pool, count: int, *, kind: str) -> list[UUID]:
    """Insert ``count`` user-targeted rows already quarantined with a typical reason."""
    records = await pool.fetch(
        "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, target_user_id, ref_id,"
        " status, attempts, last_error)"
        " SELECT messenger.realtime_new_id(), $1, 'User', gen_random_uuid(), gen_random_uuid(),"
        " 'Quarantined', 8, 'HubUnavailable:Unreachable: no outcome after 8 attempts'"
        " FROM generate_series(1, $2) RETURNING id",
        kind,
        count,
    )
    return sorted(r["id"] for r in records)
