"""Conferences of a chat: start, invite, join, leave, end. Every event goes to
``chat:{chatId}`` (``session_kind = Conference``): only the chat's active members receive it.

``ref_id`` is the conference for ``ConferenceStarted`` / ``ConferenceEnded`` and the roster row
for ``ConferenceInvited`` / ``ConferenceParticipantJoined`` / ``ConferenceParticipantLeft``.
``ConferenceStarted`` and ``ConferenceInvited`` carry the media join minted at delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

from realtime_dispatch.contracts.messenger_rest import ConferenceOut, RosterOut
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import (
    insert_unique,
    is_active_member,
    refuse_if_blocked,
    refuse_if_blocked_in_chat,
    require_active_member,
)
from realtime_dispatch.messenger.refusals import Conflict, Forbidden, NotFound
from realtime_dispatch.messenger.sessions import conference_intent, new_room_name
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.values.ids import new_id

K = RealtimeDispatchKind


async def _conference(
    conn: DbConnection, conference_id: UUID, actor: UUID, *, member: bool = True
) -> asyncpg.Record:
    """The conference, locked; NotFound when missing, and (``member``) the actor must be an
    active member of its chat."""
    row = await conn.fetchrow(
        "SELECT chat_id, status, started_by_user_id FROM messenger.conference_sessions"
        " WHERE id = $1 FOR UPDATE",
        conference_id,
    )
    if row is None:
        raise NotFound("conference not found")
    if member:
        await require_active_member(conn, row["chat_id"], actor)
    return row


def _require_active(conference: asyncpg.Record) -> None:
    if conference["status"] != "Active":
        raise Conflict("the conference has ended")


async def start_conference(conn: DbConnection, *, chat_id: UUID, actor: UUID) -> UUID:
    """An active member not blocked in the chat starts its conference (one at a time) and
    joins it."""
    conference_id = new_id()
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        await refuse_if_blocked_in_chat(conn, chat_id=chat_id, actor=actor)
        await insert_unique(
            conn,
            "a conference is already running in this chat",
            "INSERT INTO messenger.conference_sessions"
            " (id, chat_id, started_by_user_id, room_name) VALUES ($1, $2, $3, $4)",
            conference_id,
            chat_id,
            actor,
            new_room_name("conf"),
        )
        await conn.execute(
            "INSERT INTO messenger.conference_participants"
            " (id, conference_id, user_id, status, joined_at) VALUES ($1, $2, $3, 'Joined', now())",
            new_id(),
            conference_id,
            actor,
        )
        await enqueue(conn, conference_intent(K.CONFERENCE_STARTED, chat_id, conference_id))
    return conference_id


async def invite_to_conference(
    conn: DbConnection, *, conference_id: UUID, actor: UUID, user_id: UUID
) -> UUID:
    """Invite another active member of the chat; returns the roster entry id."""
    async with conn.transaction():
        conference = await _conference(conn, conference_id, actor)
        _require_active(conference)
        chat_id = conference["chat_id"]
        if not await is_active_member(conn, chat_id, user_id):
            raise Conflict("the user is not a member of this chat")
        await refuse_if_blocked(conn, blocker=user_id, actor=actor)
        await refuse_if_blocked_in_chat(conn, chat_id=chat_id, actor=actor)
        entry_id = await conn.fetchval(
            """
            INSERT INTO messenger.conference_participants
                (id, conference_id, user_id, status, invited_by_user_id, invited_at)
            VALUES ($1, $2, $3, 'Invited', $4, now())
            ON CONFLICT (conference_id, user_id) DO UPDATE
            SET status = 'Invited', invited_by_user_id = EXCLUDED.invited_by_user_id,
                invited_at = EXCLUDED.invited_at
            WHERE messenger.conference_participants.status <> 'Joined'
            RETURNING id
            """,
            new_id(),
            conference_id,
            user_id,
            actor,
        )
        if entry_id is None:
            raise Conflict("the user is already in the conference")
        await enqueue(conn, conference_intent(K.CONFERENCE_INVITED, chat_id, entry_id))
    return entry_id  # type: ignore[no-any-return]


async def join_conference(conn: DbConnection, *, conference_id: UUID, actor: UUID) -> UUID:
    async with conn.transaction():
        conference = await _conference(conn, conference_id, actor)
        _require_active(conference)
        await refuse_if_blocked_in_chat(conn, chat_id=conference["chat_id"], actor=actor)
        entry_id = await conn.fetchval(
            """
            INSERT INTO messenger.conference_participants
                (id, conference_id, user_id, status, joined_at)
            VALUES ($1, $2, $3, 'Joined', now())
            ON CONFLICT (conference_id, user_id) DO UPDATE
            SET status = 'Joined', joined_at = now(), left_at = NULL
            WHERE messenger.conference_participants.status <> 'Joined'
            RETURNING id
            """,
            new_id(),
            conference_id,
            actor,
        )
        if entry_id is None:
            raise Conflict("already in the conference")
        await enqueue(
            conn,
            conference_intent(K.CONFERENCE_PARTICIPANT_JOINED, conference["chat_id"], entry_id),
        )
    return entry_id  # type: ignore[no-any-return]


async def leave_conference(conn: DbConnection, *, conference_id: UUID, actor: UUID) -> UUID:
    """Leave; allowed even after leaving the chat (the roster says who is in the room)."""
    async with conn.transaction():
        conference = await _conference(conn, conference_id, actor, member=False)
        entry_id = await conn.fetchval(
            "UPDATE messenger.conference_participants SET status = 'Left', left_at = now()"
            " WHERE conference_id = $1 AND user_id = $2 AND status = 'Joined' RETURNING id",
            conference_id,
            actor,
        )
        if entry_id is None:
            raise NotFound("you are not in this conference")
        await enqueue(
            conn, conference_intent(K.CONFERENCE_PARTICIPANT_LEFT, conference["chat_id"], entry_id)
        )
    return entry_id  # type: ignore[no-any-return]


async def end_conference(conn: DbConnection, *, conference_id: UUID, actor: UUID) -> None:
    """The starter ends it; everyone still in the room is marked as left (one push: ended)."""
    async with conn.transaction():
        conference = await _conference(conn, conference_id, actor)
        if conference["started_by_user_id"] != actor:
            raise Forbidden("only the user who started the conference may end it")
        _require_active(conference)
        await conn.execute(
            "UPDATE messenger.conference_sessions SET status = 'Ended', ended_at = now(),"
            " ended_by_user_id = $2 WHERE id = $1",
            conference_id,
            actor,
        )
        await close_ended(conn, [(conference_id, conference["chat_id"])])


async def close_ended(conn: DbConnection, ended: Sequence[tuple[UUID, UUID]]) -> None:
    """For conferences just ended in the caller's transaction (``(conference, chat)`` pairs):
    everyone still in the room is marked as left, and one ``ConferenceEnded`` goes to each
    chat (the end by its starter and the conference-room reaper's alike)."""
    if not ended:
        return
    await conn.execute(
        "UPDATE messenger.conference_participants SET status = 'Left', left_at = now()"
        " WHERE conference_id = ANY($1::uuid[]) AND status = 'Joined'",
        [conference_id for conference_id, _ in ended],
    )
    await enqueue(
        conn,
        *(
            conference_intent(K.CONFERENCE_ENDED, chat_id, conference_id)
            for conference_id, chat_id in ended
        ),
    )


_CONFERENCE_COLUMNS = (
    "id AS conference_id, chat_id, room_name, status, started_by_user_id, started_at, ended_at"
)
"""A conference as :class:`ConferenceOut` names it (its roster apart)."""


async def _view(conn: DbConnection, r: asyncpg.Record | None, viewer: UUID) -> ConferenceOut:
    """The conference with its roster, for an active member of its chat (inside a read
    transaction)."""
    if r is None:
        raise NotFound("conference not found")
    await require_active_member(conn, r["chat_id"], viewer)
    roster = await conn.fetch(
        "SELECT user_id, status FROM messenger.conference_participants"
        " WHERE conference_id = $1 ORDER BY id",
        r["conference_id"],
    )
    return ConferenceOut(
        **dict(r),
        roster=[RosterOut(user_id=e["user_id"], status=e["status"]) for e in roster],
    )


async def get_conference(conn: DbConnection, *, conference_id: UUID, viewer: UUID) -> ConferenceOut:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        r = await conn.fetchrow(
            f"SELECT {_CONFERENCE_COLUMNS} FROM messenger.conference_sessions WHERE id = $1",
            conference_id,
        )
        return await _view(conn, r, viewer)


async def live_conference(conn: DbConnection, *, chat_id: UUID, viewer: UUID) -> ConferenceOut:
    """The chat's running conference; NotFound when there is none."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await require_active_member(conn, chat_id, viewer)
        r = await conn.fetchrow(
            f"SELECT {_CONFERENCE_COLUMNS} FROM messenger.conference_sessions"
            " WHERE chat_id = $1 AND status = 'Active'",
            chat_id,
        )
        if r is None:
            raise NotFound("no conference is running in this chat")
        return await _view(conn, r, viewer)
