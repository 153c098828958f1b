"""Chats and their membership: create, add / remove / leave, rename, read one.

A chat's creation and every membership change write a ``messenger.chat_events`` row and a
``ChatUpdated`` outbox row and announce themselves with ``pg_notify('realtime_membership', …)``,
all in one transaction: the hub has applied the change before the dispatcher can push the
event, so a new member receives it and a removed member receives nothing more of the chat.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import (
    has_blocked,
    refuse_if_blocked_in_chat,
    require_active_member,
)
from realtime_dispatch.messenger.membership import notify_membership
from realtime_dispatch.messenger.refusals import Forbidden, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind
from realtime_dispatch.values.ids import new_id


class ChatEventKind(StrEnum):
    CHAT_CREATED = "ChatCreated"
    MEMBER_ADDED = "MemberAdded"
    MEMBER_REMOVED = "MemberRemoved"
    MEMBER_LEFT = "MemberLeft"
    TITLE_CHANGED = "TitleChanged"


@dataclass(frozen=True, slots=True)
class ParticipantView:
    user_id: UUID
    active: bool
    read_seq: int = 0


@dataclass(frozen=True, slots=True)
class ChatView:
    chat_id: UUID
    title: str
    participants: tuple[ParticipantView, ...]
    last_seq: int


@dataclass(frozen=True, slots=True)
class ChatSummary:
    chat_id: UUID
    title: str
    last_seq: int
    read_seq: int
    updated_at: datetime


_ACTIVATE_SQL = """
INSERT INTO messenger.participants (id, chat_id, user_id) VALUES ($1, $2, $3)
ON CONFLICT (chat_id, user_id)
DO UPDATE SET active = true, left_at = NULL, joined_at = now()
WHERE NOT messenger.participants.active
RETURNING id
"""
_DEACTIVATE_SQL = """
UPDATE messenger.participants SET active = false, left_at = now()
WHERE chat_id = $1 AND user_id = $2 AND active
RETURNING id
"""
_EVENT_SQL = """
INSERT INTO messenger.chat_events (id, chat_id, event_kind, actor_user_id, subject_user_id)
VALUES ($1, $2, $3, $4, $5)
"""


async def record_chat_event(
    conn: DbConnection,
    chat_id: UUID,
    kind: ChatEventKind,
    *,
    actor: UUID | None,
    subject: UUID | None,
) -> UUID:
    """Insert a chat event and its ``ChatUpdated`` push (inside the caller's transaction). The
    outbox row takes the event's id, so the push's ``eventId`` names the chat event too."""
    event_id = new_id()
    await conn.execute(_EVENT_SQL, event_id, chat_id, kind.value, actor, subject)
    await enqueue(
        conn,
        OutboxIntent.to_chat(RealtimeDispatchKind.CHAT_UPDATED, chat_id, ref_id=event_id),
        entry_ids=[event_id],
    )
    return event_id


async def create_chat(
    conn: DbConnection, *, creator: UUID, title: str, members: Iterable[UUID] = ()
) -> UUID:
    """A chat with ``creator`` and ``members`` as active participants. Nobody who has blocked
    the creator can be added. Creation is pushed: a ``ChatCreated`` chat event (actor: the
    creator) and its ``ChatUpdated`` row, in the same transaction as the membership
    notifications, so every member's connection has joined ``chat:{chatId}`` before the push
    reaches the group (the hub's membership barrier) and their clients list the chat at once."""
    chat_id = new_id()
    users = list(dict.fromkeys([creator, *members]))
    async with conn.transaction():
        for user in users[1:]:
            if await has_blocked(conn, user, creator):
                raise Forbidden("a member has blocked you")
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
        await record_chat_event(
            conn, chat_id, ChatEventKind.CHAT_CREATED, actor=creator, subject=None
        )
    return chat_id


async def _change_membership(
    conn: DbConnection, *, chat_id: UUID, user_id: UUID, active: bool, actor: UUID | None
) -> UUID | None:
    """Apply the change inside an open transaction; the chat event id when something changed."""
    if await conn.fetchval("SELECT 1 FROM messenger.chats WHERE id = $1", chat_id) is None:
        raise NotFound("chat not found")
    if active:
        changed = await conn.fetchval(_ACTIVATE_SQL, new_id(), chat_id, user_id)
        kind = ChatEventKind.MEMBER_ADDED
    else:
        changed = await conn.fetchval(_DEACTIVATE_SQL, chat_id, user_id)
        kind = ChatEventKind.MEMBER_LEFT if actor == user_id else ChatEventKind.MEMBER_REMOVED
    await notify_membership(conn, chat_id, user_id, active=active)
    if changed is None:
        return None
    return await record_chat_event(conn, chat_id, kind, actor=actor, subject=user_id)


async def set_participant(
    conn: DbConnection,
    *,
    chat_id: UUID,
    user_id: UUID,
    active: bool,
    actor: UUID | None = None,
) -> UUID | None:
    """Add (or re-activate) / remove a participant without access checks (the system actor;
    REST goes through :func:`add_participant` / :func:`remove_participant`). Announces the
    change to the hub; when the state changed, records the chat event and its ``ChatUpdated``
    push and returns the event id."""
    async with conn.transaction():
        return await _change_membership(
            conn, chat_id=chat_id, user_id=user_id, active=active, actor=actor
        )


async def add_participant(
    conn: DbConnection, *, chat_id: UUID, actor: UUID, user_id: UUID
) -> UUID | None:
    """An active member adds ``user_id`` (unless that user has blocked the actor, or the actor
    is blocked in this chat)."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        await refuse_if_blocked_in_chat(conn, chat_id=chat_id, actor=actor)
        if await has_blocked(conn, user_id, actor):
            raise Forbidden("the user has blocked you")
        return await _change_membership(
            conn, chat_id=chat_id, user_id=user_id, active=True, actor=actor
        )


async def remove_participant(
    conn: DbConnection, *, chat_id: UUID, actor: UUID, user_id: UUID
) -> UUID | None:
    """A member leaves (``actor == user_id``), or the chat's creator removes a member."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        if actor != user_id:
            creator = await conn.fetchval(
                "SELECT created_by FROM messenger.chats WHERE id = $1", chat_id
            )
            if creator != actor:
                raise Forbidden("only the chat's creator may remove other members")
            active = await conn.fetchval(
                "SELECT active FROM messenger.participants WHERE chat_id = $1 AND user_id = $2",
                chat_id,
                user_id,
            )
            if not active:
                raise NotFound("not a participant of this chat")
        return await _change_membership(
            conn, chat_id=chat_id, user_id=user_id, active=False, actor=actor
        )


async def rename_chat(conn: DbConnection, *, chat_id: UUID, actor: UUID, title: str) -> UUID | None:
    """Any active member not blocked in the chat may change the title; an unchanged title
    records nothing."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        await refuse_if_blocked_in_chat(conn, chat_id=chat_id, actor=actor)
        changed = await conn.fetchval(
            "UPDATE messenger.chats SET title = $2, updated_at = now()"
            " WHERE id = $1 AND title <> $2 RETURNING id",
            chat_id,
            title,
        )
        if changed is None:
            return None
        return await record_chat_event(
            conn, chat_id, ChatEventKind.TITLE_CHANGED, actor=actor, subject=None
        )


async def get_chat(conn: DbConnection, *, chat_id: UUID, viewer: UUID) -> ChatView:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await require_active_member(conn, chat_id, viewer)
        chat = await conn.fetchrow(
            "SELECT title, last_seq FROM messenger.chats WHERE id = $1", chat_id
        )
        assert chat is not None
        rows = await conn.fetch(
            "SELECT user_id, active, last_read_seq FROM messenger.participants WHERE chat_id = $1"
            " ORDER BY joined_at, user_id",
            chat_id,
        )
    return ChatView(
        chat_id=chat_id,
        title=str(chat["title"]),
        participants=tuple(
            ParticipantView(r["user_id"], bool(r["active"]), int(r["last_read_seq"])) for r in rows
        ),
        last_seq=int(chat["last_seq"]),
    )


# The caller's active chats, most recently active first; (updated_at, id) is the keyset cursor.
_MY_CHATS_SQL = """
SELECT c.id, c.title, c.last_seq, p.last_read_seq, c.updated_at
FROM messenger.participants p JOIN messenger.chats c ON c.id = p.chat_id
WHERE p.user_id = $1 AND p.active
  AND ($2::timestamptz IS NULL OR (c.updated_at, c.id) < ($2::timestamptz, $3::uuid))
ORDER BY c.updated_at DESC, c.id DESC
LIMIT $4
"""


async def list_chats(
    conn: DbConnection,
    *,
    user: UUID,
    limit: int = 50,
    after: tuple[datetime, UUID] | None = None,
) -> list[ChatSummary]:
    """The chats where ``user`` is an active member, most recently active first (a send or a
    title change moves a chat up); ``after`` = the last item of the previous page."""
    at, chat_id = after if after is not None else (None, None)
    rows = await conn.fetch(_MY_CHATS_SQL, user, at, chat_id, limit)
    return [
        ChatSummary(
            chat_id=r["id"],
            title=r["title"],
            last_seq=int(r["last_seq"]),
            read_seq=int(r["last_read_seq"]),
            updated_at=r["updated_at"],
        )
        for r in rows
    ]
