"""Join credentials on request: a party of a ringing or active call, or an active member of
the chat of a live conference, gets a :class:`~realtime_dispatch.contracts.media.MediaJoin`
minted now for them alone, with the same minter the dispatcher uses at delivery. Nothing is
stored: a lost push or an expired token is recovered by asking again. A user the other party
of the call has blocked, or who is blocked in the conference's chat, gets none (403), as they
could not join."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.contracts.media import MediaJoin
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import (
    refuse_if_blocked,
    refuse_if_blocked_in_chat,
)
from realtime_dispatch.messenger.calls import LIVE_STATUSES
from realtime_dispatch.messenger.refusals import Conflict, MediaUnavailable
from realtime_dispatch.messenger.sessions import member_conference, other_party, party_call


def _mint(minter: MediaMinter, room_name: str, **subject: UUID) -> MediaJoin:
    media = minter.mint(room_name, **subject)
    if media is None:
        raise MediaUnavailable("media credentials are not configured on this server")
    return media


async def call_media(
    conn: DbConnection, minter: MediaMinter, *, call_id: UUID, user: UUID
) -> MediaJoin:
    r = await party_call(
        conn, call_id, user, columns="caller_user_id, callee_user_id, room_name, status"
    )
    if r["status"] not in LIVE_STATUSES:
        raise Conflict(f"the call is {r['status']}")
    await refuse_if_blocked(conn, blocker=other_party(r, user), actor=user)
    return _mint(minter, r["room_name"], user_id=user)


async def conference_media(
    conn: DbConnection, minter: MediaMinter, *, conference_id: UUID, user: UUID
) -> MediaJoin:
    """For the caller alone (``context.user`` and the TURN username name the user), unlike the
    chat-scoped token in ``conference_started`` / ``conference_invited``."""
    r = await member_conference(conn, conference_id, user, columns="chat_id, room_name, status")
    await refuse_if_blocked_in_chat(conn, chat_id=r["chat_id"], actor=user)  # as join is
    if r["status"] != "Active":
        raise Conflict("the conference has ended")
    return _mint(minter, r["room_name"], user_id=user, chat_id=r["chat_id"])
