"""Messages: send (gap-free per-chat seq), edit (sender, within 60 s), delete, list.

The seq comes from ``chats.last_seq``, incremented under the chat row's lock by the sending
statement (one statement takes the seq and writes the message and its push intent): concurrent
senders queue on that lock, so seqs are 1..N with no gap or duplicate (a rolled-back send rolls
its increment back too).
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
from realtime_dispatch.outbox.enqueue import enqueue, enqueue_select_sql
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


# The whole send is one statement, so one round trip (BEGIN, the sender check, the seq, the
# message, the outbox row and COMMIT were six): per-round-trip overhead was most of the owner's
# and the server's CPU per send, and the chat row lock is now held for one statement instead of
# across four round trips. All CTEs share one snapshot and data-modifying CTEs run even when
# nothing reads them, so each write is gated by the rows of the one before: no bump unless the
# sender may send, no message without a bump, no outbox row without a message. The final SELECT
# returns the sender's facts even for a refused send (no row at all: not a participant).
# The outbox's NOTIFY trigger is per statement, so it fires on a refused send too (zero rows):
# at worst an idle dispatcher wakes, claims nothing and sleeps again.
# The outbox id is made by the server once the chat row lock is granted (migration 0007): the
# dispatcher claims in id order, and an id made before waiting for the lock could sort before the
# id of a send with a smaller seq. The message id needs no such order (messages go by seq).
# $1 chat, $2 sender, $3 body, $4 message id, $5 kind, $6 target kind.
_SEND_OUTBOX_SQL = enqueue_select_sql(
    {
        "id": "messenger.realtime_new_id()",
        "kind": "$5::text",
        "target_kind": "$6::text",
        "chat_id": "$1",
        "message_id": "$4",
        "seq": "seq",
    },
    "msg",
)
_SEND_SQL = f"""
WITH sender AS ({_SENDER_SQL}),
bump AS (
    UPDATE messenger.chats SET last_seq = last_seq + 1
    WHERE id = $1
      AND EXISTS (SELECT 1 FROM sender WHERE active AND NOT (blocked AND others = 1))
    RETURNING last_seq
),
msg AS (
    INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)
    SELECT $4::uuid, $1, last_seq, $2, $3::text FROM bump
    RETURNING seq, sent_at
),
outbox AS ({_SEND_OUTBOX_SQL} RETURNING id)
SELECT s.active, s.others, s.blocked, m.seq, m.sent_at, o.id AS outbox_id
FROM sender s LEFT JOIN msg m ON true LEFT JOIN outbox o ON true
"""


async def send_message(
    conn: DbConnection, *, chat_id: UUID, sender: UUID, body: str
) -> SentMessage:
    """Allocate the next per-chat seq under the chat row lock, insert, enqueue the push: one
    statement, atomic on its own or part of the caller's open transaction."""
    message_id = new_id()
    row = await conn.fetchrow(
        _SEND_SQL,
        chat_id,
        sender,
        body,
        message_id,
        RealtimeDispatchKind.MESSAGE_RECEIVED.value,
        RealtimeTargetKind.CHAT_GROUP.value,
    )
    if row is None or not row["active"]:
        await require_active_member(conn, chat_id, sender)  # raises NotFound / Forbidden
        raise Forbidden("not an active member")
    if row["blocked"] and row["others"] == 1:
        raise Forbidden("the user has blocked you")
    if row["seq"] is None:  # only if the chat row was deleted under this send
        raise NotFound("chat not found")
    return SentMessage(message_id, chat_id, int(row["seq"]), row["sent_at"], row["outbox_id"])


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
