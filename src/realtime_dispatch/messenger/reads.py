"""Read receipts: a participant's ``last_read_seq`` only moves forward; each move is pushed to
the chat as ``ReadReceiptUpdated`` (``ref_id`` = the participant row), unless the reader is
blocked in the chat (:mod:`.access`)."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import is_blocked_in_chat, require_active_member
from realtime_dispatch.messenger.refusals import InvalidInput
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind

_READ_SQL = """
UPDATE messenger.participants p SET last_read_seq = $3, last_read_at = now()
FROM messenger.chats c
WHERE p.chat_id = $1 AND p.user_id = $2 AND c.id = p.chat_id
  AND p.last_read_seq < $3 AND $3 <= c.last_seq
RETURNING p.id
"""


async def mark_read(conn: DbConnection, *, chat_id: UUID, user_id: UUID, seq: int) -> bool:
    """Move the reader's mark to ``seq``; ``False`` (and no push) when it is already there."""
    if seq < 0:
        raise InvalidInput("seq must be >= 0")
    async with conn.transaction():
        await require_active_member(conn, chat_id, user_id)
        last_seq = await conn.fetchval(
            "SELECT last_seq FROM messenger.chats WHERE id = $1", chat_id
        )
        if seq > int(last_seq):
            raise InvalidInput("seq is beyond the chat's last message")
        participant_id = await conn.fetchval(_READ_SQL, chat_id, user_id, seq)
        if participant_id is None:
            return False
        if await is_blocked_in_chat(conn, chat_id=chat_id, actor=user_id):
            return True  # recorded, but the blocker is not told what the blocked user read
        await enqueue(
            conn,
            OutboxIntent.to_chat(
                RealtimeDispatchKind.READ_RECEIPT_UPDATED, chat_id, ref_id=participant_id
            ),
        )
    return True
