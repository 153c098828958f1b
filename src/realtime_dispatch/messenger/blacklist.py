"""The blacklist: block / unblock. A blocked user cannot call, add to a chat, invite to a
conference or send a contact request to the user who blocked them; and in a chat that is, or
has been since the block, a chat of just the two of them, cannot post, edit, add members,
rename, or start, join or invite to a conference, get its media credentials, start a
recording or a screen share or report a recording's failure in it (:mod:`.access`,
:mod:`.sessions`), however many members are added afterwards; their read receipts and deletes
there are not pushed. A block ends the pending contact requests between the two, both ways.

``BlacklistChanged`` goes to the blocker's own ``user:`` group (their other devices), never to
the blocked user, who is not told.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import insert_unique
from realtime_dispatch.messenger.refusals import InvalidInput, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind
from realtime_dispatch.values.ids import new_id


@dataclass(frozen=True, slots=True)
class BlockedView:
    entry_id: UUID
    user_id: UUID
    since: datetime


_CANCEL_REQUESTS_SQL = """
UPDATE messenger.contact_requests SET status = 'Declined', responded_at = now()
WHERE status = 'Pending'
  AND ((requester_user_id = $1 AND addressee_user_id = $2)
       OR (requester_user_id = $2 AND addressee_user_id = $1))
"""


def _changed(owner: UUID, entry_id: UUID) -> OutboxIntent:
    return OutboxIntent(
        kind=RealtimeDispatchKind.BLACKLIST_CHANGED,
        target_kind=RealtimeTargetKind.USER,
        target_user_id=owner,
        ref_id=entry_id,
    )


async def block_user(conn: DbConnection, *, owner: UUID, blocked: UUID) -> UUID:
    if owner == blocked:
        raise InvalidInput("you cannot block yourself")
    entry_id = new_id()
    async with conn.transaction():
        await insert_unique(
            conn,
            "the user is already blocked",
            "INSERT INTO messenger.blacklist (id, owner_user_id, blocked_user_id)"
            " VALUES ($1, $2, $3)",
            entry_id,
            owner,
            blocked,
        )
        # Pending contact requests between the two, both ways, end as declined: the blocked
        # user can no longer accept the blocker's, and is not told more than a decline says.
        await conn.execute(_CANCEL_REQUESTS_SQL, owner, blocked)
        await enqueue(conn, _changed(owner, entry_id))
    return entry_id


async def unblock_user(conn: DbConnection, *, owner: UUID, blocked: UUID) -> UUID:
    async with conn.transaction():
        entry_id = await conn.fetchval(
            "UPDATE messenger.blacklist SET removed_at = now()"
            " WHERE owner_user_id = $1 AND blocked_user_id = $2 AND removed_at IS NULL"
            " RETURNING id",
            owner,
            blocked,
        )
        if entry_id is None:
            raise NotFound("the user is not blocked")
        await enqueue(conn, _changed(owner, entry_id))
    return entry_id  # type: ignore[no-any-return]


async def list_blocked(conn: DbConnection, *, owner: UUID) -> list[BlockedView]:
    rows = await conn.fetch(
        "SELECT id, blocked_user_id, created_at FROM messenger.blacklist"
        " WHERE owner_user_id = $1 AND removed_at IS NULL ORDER BY created_at",
        owner,
    )
    return [BlockedView(r["id"], r["blocked_user_id"], r["created_at"]) for r in rows]
