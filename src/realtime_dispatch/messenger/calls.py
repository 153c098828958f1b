"""1:1 calls: invite, answer, decline, cancel, end, and the call-timeout reaper.

Every call event goes to both parties' ``user:`` groups (``session_kind = Direct``,
``ref_id`` = the call): the other party reacts, and the actor's other devices stop ringing.
``CallInvited`` carries the media join (room token, TURN credentials) minted by the dispatcher
at delivery for each party; only the room name is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol
from uuid import UUID

import asyncpg

from realtime_dispatch.contracts.messenger_rest import CallOut
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import refuse_to_reach
from realtime_dispatch.messenger.refusals import Conflict, Forbidden
from realtime_dispatch.messenger.sessions import direct_intents, new_room_name, party_call
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.values.ids import new_id

K = RealtimeDispatchKind


async def start_call(conn: DbConnection, *, caller: UUID, callee: UUID) -> UUID:
    """Ring ``callee``; refused when the callee has blocked the caller."""
    call_id = new_id()
    async with conn.transaction():
        await refuse_to_reach(conn, actor=caller, other=callee, yourself="you cannot call yourself")
        await conn.execute(
            "INSERT INTO messenger.call_sessions (id, caller_user_id, callee_user_id, room_name)"
            " VALUES ($1, $2, $3, $4)",
            call_id,
            caller,
            callee,
            new_room_name("call"),
        )
        await enqueue(conn, *direct_intents(K.CALL_INVITED, call_id, caller, callee))
    return call_id


_TRANSITION_SQL = """
UPDATE messenger.call_sessions
SET status = $2::varchar,
    answered_at = CASE WHEN $2::varchar = 'Active' THEN now() ELSE answered_at END,
    ended_at = CASE WHEN $2::varchar = 'Active' THEN ended_at ELSE now() END,
    ended_by_user_id = CASE WHEN $2::varchar = 'Active' THEN NULL ELSE $3::uuid END
WHERE id = $1
"""


@dataclass(frozen=True, slots=True)
class CallTransition:
    """Who may move a call from one status to the next; ``push`` goes to both parties."""

    who: Literal["caller", "callee"] | None
    """The party allowed to (``None``: either)."""
    from_status: str
    to_status: str
    push: RealtimeDispatchKind


# action: who may, from, to, what both parties are pushed
TRANSITIONS: dict[str, CallTransition] = {
    "answer": CallTransition("callee", "Ringing", "Active", K.CALL_ANSWERED),
    "decline": CallTransition("callee", "Ringing", "Declined", K.CALL_DECLINED),
    "cancel": CallTransition("caller", "Ringing", "Cancelled", K.CALL_CANCELLED),
    "end": CallTransition(None, "Active", "Ended", K.CALL_ENDED),
}


async def transition(
    conn: DbConnection, rule: CallTransition, *, call_id: UUID, actor: UUID
) -> None:
    """Apply ``rule`` to the call: NotFound for a non-party, Forbidden for the wrong party,
    Conflict when the call is not in ``rule.from_status``."""
    async with conn.transaction():
        call = await party_call(conn, call_id, actor, lock="FOR UPDATE")
        if rule.who is not None and actor != call[f"{rule.who}_user_id"]:
            raise Forbidden(f"only the {rule.who} may do this")
        if call["status"] != rule.from_status:
            raise Conflict(f"the call is {call['status']}, not {rule.from_status}")
        await conn.execute(_TRANSITION_SQL, call_id, rule.to_status, actor)
        await enqueue(
            conn,
            *direct_intents(rule.push, call_id, call["caller_user_id"], call["callee_user_id"]),
        )


class CallCommand(Protocol):
    async def __call__(self, conn: DbConnection, *, call_id: UUID, actor: UUID) -> None: ...


def _command(action: str) -> CallCommand:
    rule = TRANSITIONS[action]

    async def command(conn: DbConnection, *, call_id: UUID, actor: UUID) -> None:
        await transition(conn, rule, call_id=call_id, actor=actor)

    command.__name__ = command.__qualname__ = f"{action}_call"
    return command


answer_call = _command("answer")
decline_call = _command("decline")
cancel_call = _command("cancel")
end_call = _command("end")


_CALL_COLUMNS = (
    "id AS call_id, caller_user_id, callee_user_id, room_name, status, created_at, answered_at,"
    " ended_at"
)
"""A call as :class:`CallOut` names it."""
LIVE_STATUSES = ("Ringing", "Active")


def _view(r: asyncpg.Record) -> CallOut:
    return CallOut(**dict(r))


async def get_call(conn: DbConnection, *, call_id: UUID, viewer: UUID) -> CallOut:
    return _view(await party_call(conn, call_id, viewer, columns=_CALL_COLUMNS))


async def list_calls(
    conn: DbConnection, *, user: UUID, statuses: tuple[str, ...] = LIVE_STATUSES
) -> list[CallOut]:
    """``user``'s calls (as caller or callee) in one of ``statuses``, newest first."""
    rows = await conn.fetch(
        f"SELECT {_CALL_COLUMNS} FROM messenger.call_sessions"
        " WHERE (caller_user_id = $1 OR callee_user_id = $1) AND status = ANY($2::varchar[])"
        " ORDER BY created_at DESC, id DESC LIMIT 100",
        user,
        list(statuses),
    )
    return [_view(r) for r in rows]
