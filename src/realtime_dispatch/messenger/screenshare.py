"""Screen share in a call or a conference: start, stop. Pushed like the session's other events
(Direct: both parties; Conference: the chat), ``ref_id`` = the share."""

from __future__ import annotations

from functools import partial
from uuid import UUID

from realtime_dispatch.contracts.messenger_rest import ScreenShareOut
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.refusals import Conflict, Forbidden
from realtime_dispatch.messenger.sessions import (
    session_record,
    start_in_session,
    visible_session_record,
)
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind

start_screen_share = partial(
    start_in_session,
    insert="INSERT INTO messenger.screen_shares"
    " (id, session_kind, call_id, conference_id, user_id) VALUES ($1, $2, $3, $4, $5)",
    busy="someone is already sharing their screen",
    push=RealtimeDispatchKind.SCREEN_SHARE_STARTED,
)
"""Share ``actor``'s screen in a live session (one sharer at a time)."""


async def stop_screen_share(conn: DbConnection, *, share_id: UUID, actor: UUID) -> None:
    """Only the user sharing may stop it."""
    async with conn.transaction():
        row, session = await session_record(
            conn,
            "SELECT call_id, conference_id, user_id, stopped_at FROM messenger.screen_shares"
            " WHERE id = $1 FOR UPDATE",
            share_id,
            actor,
            "screen share",
        )
        if row["user_id"] != actor:
            raise Forbidden("only the user sharing may stop it")
        if row["stopped_at"] is not None:
            raise Conflict("the screen share has already stopped")
        await conn.execute(
            "UPDATE messenger.screen_shares SET stopped_at = now() WHERE id = $1", share_id
        )
        await enqueue(conn, *session.intents(RealtimeDispatchKind.SCREEN_SHARE_STOPPED, share_id))


async def get_screen_share(conn: DbConnection, *, share_id: UUID, viewer: UUID) -> ScreenShareOut:
    row = await visible_session_record(
        conn,
        "SELECT id AS screen_share_id, session_kind, call_id, conference_id, user_id,"
        " started_at, stopped_at FROM messenger.screen_shares WHERE id = $1",
        share_id,
        viewer,
        "screen share",
    )
    return ScreenShareOut(**dict(row))
