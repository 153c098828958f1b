"""Read receipts: a participant's ``last_read_seq`` only moves forward; each move is pushed to
the chat as ``ReadReceiptUpdated`` (``ref_id`` = the participant row), unless the reader is
blocked in the chat (:mod:`.access`)."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.messenger.access import is_blocked_in_chat, require_active_member
from realtime_dispatch.messenger.refusals import InvalidInput, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind

_READ_SQL = """
UPDATE messenger.participants p SET last_read_seq = $3, last_read_at = now()
FROM messenger.chats c
WHERE p.chat_id = $1 AND p.user_id = $2 AND c.id = p.chat_id
  AND p.last_read_seq < $3 AND $3 <= c.last_seq
RETURNING p.id
"""
# Presence consent (manifest query ``presence_chats``): a first read mark past 0 by a member who
# had not taken part (not the creator, no message sent) hints the hubs to read the reader's
# chats again (a membership hint: no ``active``), in the same transaction; later reads do not.
_TOOK_PART_SQL = f"""
SELECT pg_notify('{MEMBERSHIP_CHANNEL}',
                 json_build_object('chatId', $1::uuid, 'userId', $2::uuid)::text) IS NULL
FROM messenger.chats c
WHERE c.id = $1 AND c.created_by IS DISTINCT FROM $2
  AND NOT EXISTS (SELECT 1 FROM messenger.messages m
                  WHERE m.chat_id = $1 AND m.sender_user_id = $2)
"""


async def mark_read(conn: DbConnection, *, chat_id: UUID, user_id: UUID, seq: int) -> bool:
    """Move the reader's mark to ``seq``; ``False`` (and no push) when it is already there."""
    if seq < 0:
        raise InvalidInput("seq must be >= 0")
    async with conn.transaction():
        await require_active_member(conn, chat_id, user_id)
        marks = await conn.fetchrow(
            "SELECT c.last_seq, p.last_read_seq FROM messenger.chats c"
            " JOIN messenger.participants p ON p.chat_id = c.id"
            " WHERE c.id = $1 AND p.user_id = $2",
            chat_id,
            user_id,
        )
        if marks is None:  # the chat was deleted meanwhile
            raise NotFound("chat not found")
        if seq > int(marks["last_seq"]):
            raise InvalidInput("seq is beyond the chat's last message")
        participant_id = await conn.fetchval(_READ_SQL, chat_id, user_id, seq)
        if participant_id is None:
            return False
        if int(marks["last_read_seq"]) == 0:
            await conn.execute(_TOOK_PART_SQL, chat_id, user_id)
        if await is_blocked_in_chat(conn, chat_id=chat_id, actor=user_id):
            return True  # recorded, but the blocker is not told what the blocked user read
        await enqueue(
            conn,
            OutboxIntent.to_chat(
                RealtimeDispatchKind.READ_RECEIPT_UPDATED, chat_id, ref_id=participant_id
            ),
        )
    return True
