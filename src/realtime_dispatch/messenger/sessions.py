"""Media sessions as recordings and screen shares see them: a 1:1 call (``Direct``: pushed to
both parties' ``user:`` groups) or a conference (``Conference``: pushed to ``chat:{chatId}``),
with the record-level check of who may act on it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from uuid import UUID

import asyncpg

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import (
    insert_unique,
    refuse_if_blocked,
    refuse_if_blocked_in_chat,
    require_active_member,
)
from realtime_dispatch.messenger.refusals import Conflict, InvalidInput, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import (
    OutboxIntent,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    SessionKind,
)
from realtime_dispatch.values.ids import new_id


def new_room_name(prefix: str) -> str:
    """An unguessable media room name (stored; it is not a credential on its own)."""
    return f"{prefix}-{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class MediaSession:
    kind: SessionKind
    call_id: UUID | None
    conference_id: UUID | None
    chat_id: UUID | None
    parties: tuple[UUID, ...]
    """Direct: caller and callee. Conference: empty (the chat's members)."""
    live: bool

    def intents(self, kind: RealtimeDispatchKind, ref_id: UUID) -> list[OutboxIntent]:
        """One push per party of a call, or one to the conference's chat."""
        if self.kind is SessionKind.DIRECT:
            return [
                OutboxIntent(
                    kind=kind,
                    target_kind=RealtimeTargetKind.USER,
                    target_user_id=party,
                    ref_id=ref_id,
                    session_kind=SessionKind.DIRECT,
                )
                for party in self.parties
            ]
        return [conference_intent(kind, self.chat_id, ref_id)]


def conference_intent(
    kind: RealtimeDispatchKind, chat_id: UUID | None, ref_id: UUID
) -> OutboxIntent:
    """A conference's push: to ``chat:{chatId}``, whose active members receive it."""
    return OutboxIntent.to_chat(kind, chat_id, ref_id=ref_id, session_kind=SessionKind.CONFERENCE)


def direct_intents(
    kind: RealtimeDispatchKind, ref_id: UUID, caller: UUID, callee: UUID
) -> list[OutboxIntent]:
    """A call's push to both parties (callee first)."""
    session = MediaSession(SessionKind.DIRECT, ref_id, None, None, (callee, caller), True)
    return session.intents(kind, ref_id)


async def party_call(
    conn: DbConnection,
    call_id: UUID,
    party: UUID,
    *,
    columns: str = "caller_user_id, callee_user_id, status",
    lock: str = "",
) -> asyncpg.Record:
    """The call's ``columns`` (``caller_user_id`` and ``callee_user_id`` among them) when
    ``party`` is its caller or callee; NotFound for anyone else, as for a missing call.
    ``lock``: ``"FOR UPDATE"``, ``"FOR SHARE"`` or none."""
    call = await conn.fetchrow(
        f"SELECT {columns} FROM messenger.call_sessions WHERE id = $1 {lock}", call_id
    )
    if call is None or party not in (call["caller_user_id"], call["callee_user_id"]):
        raise NotFound("call not found")
    return call


async def member_conference(
    conn: DbConnection,
    conference_id: UUID,
    member: UUID,
    *,
    columns: str = "chat_id, status",
    lock: str = "",
) -> asyncpg.Record:
    """The conference's ``columns`` (``chat_id`` among them) when ``member`` is an active member
    of its chat (Forbidden otherwise, :func:`~.access.require_active_member`); NotFound when
    there is no such conference. ``lock``: ``"FOR UPDATE"``, ``"FOR SHARE"`` or none."""
    conference = await conn.fetchrow(
        f"SELECT {columns} FROM messenger.conference_sessions WHERE id = $1 {lock}", conference_id
    )
    if conference is None:
        raise NotFound("conference not found")
    await require_active_member(conn, conference["chat_id"], member)
    return conference


def other_party(call: asyncpg.Record, party: UUID) -> UUID:
    """The caller for the callee, the callee for the caller."""
    other: UUID = (
        call["callee_user_id"] if party == call["caller_user_id"] else call["caller_user_id"]
    )
    return other


async def load_session(
    conn: DbConnection,
    *,
    actor: UUID,
    call_id: UUID | None = None,
    conference_id: UUID | None = None,
    require_live: bool = False,
    refuse_blocked: bool = False,
) -> MediaSession:
    """The call or conference ``actor`` acts on, locked for the rest of the transaction.

    A call is visible to its two parties only (NotFound for anyone else); a conference to the
    active members of its chat. ``require_live``: the call is Active / the conference Active.
    ``refuse_blocked``: Forbidden when the other party of the call has blocked ``actor``, or
    ``actor`` is blocked in the conference's chat (:mod:`.access`): what reaches the other
    side (a recording, a screen share, a failure code) is refused as a message would be.
    """
    if (call_id is None) == (conference_id is None):
        raise InvalidInput("give exactly one of callId and conferenceId")
    if call_id is not None:
        call = await party_call(conn, call_id, actor, lock="FOR SHARE")
        if refuse_blocked:
            await refuse_if_blocked(conn, blocker=other_party(call, actor), actor=actor)
        session = MediaSession(
            SessionKind.DIRECT,
            call_id,
            None,
            None,
            (call["callee_user_id"], call["caller_user_id"]),
            call["status"] == "Active",
        )
    else:
        assert conference_id is not None  # exactly one of the two, checked above
        conference = await member_conference(conn, conference_id, actor, lock="FOR SHARE")
        if refuse_blocked:
            await refuse_if_blocked_in_chat(conn, chat_id=conference["chat_id"], actor=actor)
        session = MediaSession(
            SessionKind.CONFERENCE,
            None,
            conference_id,
            conference["chat_id"],
            (),
            conference["status"] == "Active",
        )
    if require_live and not session.live:
        raise Conflict("the call or conference is not in progress")
    return session


async def session_record(
    conn: DbConnection,
    sql: str,
    record_id: UUID,
    actor: UUID,
    what: str,
    *,
    refuse_blocked: bool = False,
) -> tuple[asyncpg.Record, MediaSession]:
    """A recording or screen share (``sql`` selects it by id, with ``call_id`` and
    ``conference_id``; NotFound(``what``) without it) and its session as :func:`load_session`
    gives it to ``actor``, in the caller's transaction."""
    row = await conn.fetchrow(sql, record_id)
    if row is None:
        raise NotFound(f"{what} not found")
    session = await load_session(
        conn,
        actor=actor,
        call_id=row["call_id"],
        conference_id=row["conference_id"],
        refuse_blocked=refuse_blocked,
    )
    return row, session


async def visible_session_record(
    conn: DbConnection, sql: str, record_id: UUID, viewer: UUID, what: str
) -> asyncpg.Record:
    """A recording or screen share (:func:`session_record`), for whoever could start one in its
    session: a party of the call, an active member of the conference's chat."""
    async with conn.transaction():
        row, _ = await session_record(conn, sql, record_id, viewer, what)
    return row


async def start_in_session(
    conn: DbConnection,
    *,
    actor: UUID,
    call_id: UUID | None = None,
    conference_id: UUID | None = None,
    insert: str,
    busy: str,
    push: RealtimeDispatchKind,
) -> UUID:
    """Start a recording or a screen share (each one's command is this with its ``insert``,
    ``busy`` and ``push`` bound): the session must be live and ``actor`` not blocked
    in it (:func:`load_session`); ``insert`` adds the row (``id, session_kind, call_id,
    conference_id`` and the actor, ``$1`` to ``$5``), Conflict(``busy``) when one is already
    running (a unique index); ``push`` goes to the session with the new id as ``ref_id``."""
    record_id = new_id()
    async with conn.transaction():
        session = await load_session(
            conn,
            actor=actor,
            call_id=call_id,
            conference_id=conference_id,
            require_live=True,
            refuse_blocked=True,
        )
        await insert_unique(
            conn,
            busy,
            insert,
            record_id,
            session.kind.value,
            session.call_id,
            session.conference_id,
            actor,
        )
        await enqueue(conn, *session.intents(push, record_id))
    return record_id
