"""Record-level checks shared by the commands: chat membership, the blacklist, and the
unique keys that make a second one a Conflict (:func:`insert_unique`).

The blacklist in a chat (:func:`refuse_if_blocked_in_chat`): a user is blocked in a chat when a
user who blocked them is an active member of it and the chat has been a chat of just the two of
them at some moment since the block was placed (``messenger.blacklist_chats``, kept by the
triggers of migration 0015), or is one now. Adding members never lifts it; in a group chat that
never came down to the two of them, the block does not silence anyone. What the blocked user
may still do there (read, delete their own messages) is done but not pushed to the chat.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.manifest.blacklist import BLOCKED_IN_CHAT_SQL
from realtime_dispatch.messenger.refusals import Conflict, Forbidden, InvalidInput, NotFound

_MEMBER_SQL = "SELECT active FROM messenger.participants WHERE chat_id = $1 AND user_id = $2"
_CHAT_EXISTS_SQL = "SELECT 1 FROM messenger.chats WHERE id = $1"
_BLOCKED_SQL = """
SELECT EXISTS (SELECT 1 FROM messenger.blacklist
               WHERE owner_user_id = $1 AND blocked_user_id = $2 AND removed_at IS NULL)
"""


async def require_active_member(conn: DbConnection, chat_id: UUID, user_id: UUID) -> None:
    """NotFound when the chat does not exist, Forbidden when ``user_id`` is not an active
    participant of it."""
    active = await conn.fetchval(_MEMBER_SQL, chat_id, user_id)
    if active is None:
        exists = await conn.fetchval(_CHAT_EXISTS_SQL, chat_id)
        raise NotFound("chat not found") if exists is None else Forbidden("not a member")
    if not active:
        raise Forbidden("not an active member")


async def is_active_member(conn: DbConnection, chat_id: UUID, user_id: UUID) -> bool:
    return bool(await conn.fetchval(_MEMBER_SQL, chat_id, user_id))


async def has_blocked(conn: DbConnection, owner: UUID, blocked: UUID) -> bool:
    """Whether ``owner`` has ``blocked`` on their blacklist now."""
    return bool(await conn.fetchval(_BLOCKED_SQL, owner, blocked))


async def refuse_if_blocked(conn: DbConnection, *, blocker: UUID, actor: UUID) -> None:
    """A blocked user cannot reach the user who blocked them."""
    if await has_blocked(conn, blocker, actor):
        raise Forbidden("the user has blocked you")


async def refuse_to_reach(conn: DbConnection, *, actor: UUID, other: UUID, yourself: str) -> None:
    """What one user starts toward another (a call, a contact request): never toward
    themselves (InvalidInput(``yourself``)), nor toward a user who has blocked them."""
    if actor == other:
        raise InvalidInput(yourself)
    await refuse_if_blocked(conn, blocker=other, actor=actor)


async def is_blocked_in_chat(conn: DbConnection, *, chat_id: UUID, actor: UUID) -> bool:
    """Whether ``actor`` is blocked in the chat (the module's rule)."""
    return bool(await conn.fetchval(BLOCKED_IN_CHAT_SQL, chat_id, actor))


async def refuse_if_blocked_in_chat(conn: DbConnection, *, chat_id: UUID, actor: UUID) -> None:
    """Forbidden when ``actor`` is blocked in the chat (the module's rule)."""
    if await is_blocked_in_chat(conn, chat_id=chat_id, actor=actor):
        raise Forbidden("the user has blocked you")


async def insert_unique(conn: DbConnection, taken: str, sql: str, *args: object) -> None:
    """Run the insert ``sql``; Conflict(``taken``) when a unique key of the row is taken (one
    pending request, one live conference a chat, one recording a session...)."""
    try:
        await conn.execute(sql, *args)
    except asyncpg.UniqueViolationError as exc:
        raise Conflict(taken) from exc
