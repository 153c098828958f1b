"""Live membership: every membership change is announced with
``pg_notify('realtime_membership', {chatId, userId, active})`` inside the changing transaction,
so every hub replica updates its ``chat:`` groups the moment the change commits, before any
later push of that chat can be claimed by the dispatcher."""

from __future__ import annotations

from uuid import UUID

import orjson

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL


async def notify_membership(
    conn: DbConnection, chat_id: UUID, user_id: UUID, *, active: bool
) -> None:
    payload = orjson.dumps({"chatId": str(chat_id), "userId": str(user_id), "active": active})
    await conn.execute("SELECT pg_notify($1, $2)", MEMBERSHIP_CHANNEL, payload.decode())
