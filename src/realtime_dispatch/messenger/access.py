"""Record-level checks shared by the commands: chat membership and the blacklist."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.database import DbConnection
from realtime_dispatch.messenger.refusals import Forbidden, NotFound

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
