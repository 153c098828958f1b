"""Owner commands of the chat domain: each writes its domain change and its push intent(s) in
one transaction (persist-then-push). Pure asyncpg; the REST API calls these.

Membership changes are also announced with ``pg_notify('realtime_membership', …)`` inside the
same transaction: every hub replica listens and updates its groups the moment the change commits,
before any later message of that chat can be claimed by the dispatcher.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg
import orjson

from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.ids import new_id
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind

MEMBERSHIP_CHANNEL = "realtime_membership"


class DomainError(RealtimeDispatchError):
    """A command refused: the REST layer maps ``code`` to a status."""

    code = "Domain"


class NotFound(DomainError):
    code = "NotFound"


class Forbidden(DomainError):
    code = "Forbidden"


class Conflict(DomainError):
    code = "Conflict"


@dataclass(frozen=True, slots=True)
class SentMessage:
    message_id: UUID
    chat_id: UUID
    seq: int
    sent_at: datetime
    outbox_id: UUID


async def notify_membership(
    conn: asyncpg.Connection, chat_id: UUID, user_id: UUID, *, active: bool
) -> None:
    payload = orjson.dumps({"chatId": str(chat_id), "userId": str(user_id), "active": active})
    await conn.execute("SELECT pg_notify($1, $2)", MEMBERSHIP_CHANNEL, payload.decode())


async def create_chat(
    conn: asyncpg.Connection, *, creator: UUID, title: str, members: Iterable[UUID] = ()
) -> UUID:
    chat_id = new_id()
    users = list(dict.fromkeys([creator, *members]))
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO messenger.chats (id, title, created_by) VALUES ($1, $2, $3)",
            chat_id,
            title,
            creator,
        )
        await conn.executemany(
            "INSERT INTO messenger.participants (id, chat_id, user_id) VALUES ($1, $2, $3)",
            [(new_id(), chat_id, user) for user in users],
        )
        for user in users:
            await notify_membership(conn, chat_id, user, active=True)
    return chat_id


async def require_active_member(conn: asyncpg.Connection, chat_id: UUID, user_id: UUID) -> None:
    active = await conn.fetchval(
        "SELECT active FROM messenger.participants WHERE chat_id = $1 AND user_id = $2",
        chat_id,
        user_id,
    )
    if active is None:
        exists = await conn.fetchval("SELECT 1 FROM messenger.chats WHERE id = $1", chat_id)
        raise NotFound("chat not found") if exists is None else Forbidden("not a member")
    if not active:
        raise Forbidden("not an active member")


async def set_participant(
    conn: asyncpg.Connection, *, chat_id: UUID, user_id: UUID, active: bool
) -> None:
    """Add (or re-activate) / remove a participant, announcing the change to the hub."""
    async with conn.transaction():
        if active:
            await conn.execute(
                """
                INSERT INTO messenger.participants (id, chat_id, user_id) VALUES ($1, $2, $3)
                ON CONFLICT (chat_id, user_id)
                DO UPDATE SET active = true, left_at = NULL, joined_at = now()
                """,
                new_id(),
                chat_id,
                user_id,
            )
        else:
            await conn.execute(
                "UPDATE messenger.participants SET active = false, left_at = now()"
                " WHERE chat_id = $1 AND user_id = $2 AND active",
                chat_id,
                user_id,
            )
        await notify_membership(conn, chat_id, user_id, active=active)


async def send_message(
    conn: asyncpg.Connection, *, chat_id: UUID, sender: UUID, body: str
) -> SentMessage:
    """Allocate the next per-chat seq under the chat row lock, insert, enqueue the push."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, sender)
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
    conn: asyncpg.Connection, chat_id: UUID, message_id: UUID
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


EDIT_WINDOW_SECONDS = 60


async def edit_message(
    conn: asyncpg.Connection, *, chat_id: UUID, message_id: UUID, editor: UUID, body: str
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
    conn: asyncpg.Connection, *, chat_id: UUID, message_id: UUID, actor: UUID
) -> None:
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
