"""Messages: send (gap-free per-chat seq), edit (sender, within 60 s), delete, list.

The seq comes from ``chats.last_seq``, incremented under the chat row's lock inside the sending
transaction: concurrent senders queue on that lock, so seqs are 1..N with no gap or duplicate
(a rolled-back send rolls its increment back too).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from realtime_dispatch.database import DbConnection
from realtime_dispatch.ids import new_id
from realtime_dispatch.messenger.access import require_active_member
from realtime_dispatch.messenger.errors import Conflict, Forbidden, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind

EDIT_WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class SentMessage:
    message_id: UUID
    chat_id: UUID
    seq: int
    sent_at: datetime
    outbox_id: UUID


@dataclass(frozen=True, slots=True)
class MessageView:
    message_id: UUID
    seq: int
    sender_user_id: UUID | None
    body: str | None
    sent_at: datetime
    edited_at: datetime | None
    deleted_at: datetime | None


# The sender's membership, how many other active members the chat has, and whether one of them
# has blocked the sender: in a two-person chat a blocked user cannot message the blocker.
_SENDER_SQL = """
SELECT p.active,
       (SELECT count(*) FROM messenger.participants o
        WHERE o.chat_id = $1 AND o.active AND o.user_id <> $2) AS others,
       EXISTS (SELECT 1 FROM messenger.blacklist b
               JOIN messenger.participants o
                 ON o.user_id = b.owner_user_id AND o.chat_id = $1 AND o.active
               WHERE b.blocked_user_id = $2 AND b.removed_at IS NULL) AS blocked
FROM messenger.participants p
WHERE p.chat_id = $1 AND p.user_id = $2
"""


async def _require_sender(conn: DbConnection, chat_id: UUID, sender: UUID) -> None:
    state = await conn.fetchrow(_SENDER_SQL, chat_id, sender)
    if state is None or not state["active"]:
        await require_active_member(conn, chat_id, sender)  # raises NotFound / Forbidden
        raise Forbidden("not an active member")
    if state["blocked"] and state["others"] == 1:
        raise Forbidden("the user has blocked you")


async def send_message(
    conn: DbConnection, *, chat_id: UUID, sender: UUID, body: str
) -> SentMessage:
    """Allocate the next per-chat seq under the chat row lock, insert, enqueue the push."""
    async with conn.transaction():
        await _require_sender(conn, chat_id, sender)
        seq = await conn.fetchval(
            "UPDATE messenger.chats SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq",
            chat_id,
        )
        message_id = new_id()
        sent_at = await conn.fetchval(
            "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
            " VALUES ($1, $2, $3, $4, $5) RETURNING sent_at",
            message_id,
            chat_id,
            seq,
            sender,
            body,
        )
        [outbox_id] = await enqueue(
            conn,
            OutboxIntent(
                kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
                target_kind=RealtimeTargetKind.CHAT_GROUP,
                chat_id=chat_id,
                message_id=message_id,
                seq=seq,
            ),
        )
    return SentMessage(message_id, chat_id, int(seq), sent_at, outbox_id)


async def _message_for_change(
    conn: DbConnection, chat_id: UUID, message_id: UUID
) -> asyncpg.Record:
    row = await conn.fetchrow(
        "SELECT seq, sender_user_id, sent_at, deleted_at FROM messenger.messages"
        " WHERE id = $1 AND chat_id = $2 FOR UPDATE",
        message_id,
        chat_id,
    )
    if row is None:
        raise NotFound("message not found")
    return row


async def edit_message(
    conn: DbConnection, *, chat_id: UUID, message_id: UUID, editor: UUID, body: str
) -> datetime:
    """Only the sender, only within :data:`EDIT_WINDOW_SECONDS` of sending."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, editor)
        row = await _message_for_change(conn, chat_id, message_id)
        if row["sender_user_id"] != editor:
            raise Forbidden("only the sender may edit a message")
        if row["deleted_at"] is not None:
            raise Conflict("message was deleted")
        edited_at = await conn.fetchval(
            "UPDATE messenger.messages SET body = $2, edited_at = now()"
            " WHERE id = $1 AND now() - sent_at <= make_interval(secs => $3)"
            " RETURNING edited_at",
            message_id,
            body,
            float(EDIT_WINDOW_SECONDS),
        )
        if edited_at is None:
            raise Conflict(f"the edit window of {EDIT_WINDOW_SECONDS} s has passed")
        await enqueue(
            conn,
            OutboxIntent(
                kind=RealtimeDispatchKind.MESSAGE_EDITED,
                target_kind=RealtimeTargetKind.CHAT_GROUP,
                chat_id=chat_id,
                message_id=message_id,
                seq=int(row["seq"]),
            ),
        )
    return edited_at  # type: ignore[no-any-return]


async def delete_message(
    conn: DbConnection, *, chat_id: UUID, message_id: UUID, actor: UUID
) -> None:
    """Only the sender; the body is cleared. Deleting twice is a no-op (no second push)."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        row = await _message_for_change(conn, chat_id, message_id)
        if row["sender_user_id"] != actor:
            raise Forbidden("only the sender may delete a message")
        if row["deleted_at"] is not None:
            return
        await conn.execute(
            "UPDATE messenger.messages SET deleted_at = now(), body = NULL, file_meta = NULL,"
            " card_text = NULL WHERE id = $1",
            message_id,
        )
        await enqueue(
            conn,
            OutboxIntent(
                kind=RealtimeDispatchKind.MESSAGE_DELETED,
                target_kind=RealtimeTargetKind.CHAT_GROUP,
                chat_id=chat_id,
                message_id=message_id,
                seq=int(row["seq"]),
            ),
        )


async def list_messages(
    conn: DbConnection, *, chat_id: UUID, viewer: UUID, after_seq: int = 0, limit: int = 50
) -> list[MessageView]:
    """Messages with ``seq > after_seq`` in seq order (deleted ones without a body)."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await require_active_member(conn, chat_id, viewer)
        rows = await conn.fetch(
            "SELECT id, seq, sender_user_id, body, sent_at, edited_at, deleted_at"
            " FROM messenger.messages WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            chat_id,
            after_seq,
            limit,
        )
    return [
        MessageView(
            message_id=r["id"],
            seq=int(r["seq"]),
            sender_user_id=r["sender_user_id"],
            body=r["body"],
            sent_at=r["sent_at"],
            edited_at=r["edited_at"],
            deleted_at=r["deleted_at"],
        )
        for r in rows
    ]
