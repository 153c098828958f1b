"""Call rows → payloads. The row's session kind picks the shape (spec: "SessionKind payload"):

* ``Direct``: the 1:1 contract, to ``user:{targetUserId}`` (a party of the call); ``ref_id`` is
  the call; ``call_invited`` carries the media join minted for the receiving party, unless
  one party has blocked the other (``media_withheld``).
* ``Conference``: the group contract, to ``chat:{chatId}``; ``ref_id`` is the conference the
  group call runs in. Only ``call_invited`` and ``call_ended`` have this shape (answering,
  declining, missing and cancelling are between two parties); ``call_invited`` carries the
  media join minted for the chat."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.contracts.calls import (
    CallAnswered,
    CallCancelled,
    CallDeclined,
    CallEnded,
    CallInvited,
    CallMissed,
    GroupCallEnded,
    GroupCallInvited,
    _CallEvent,
)
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent, build_apart
from realtime_dispatch.dispatch.projections.conferences import (
    ConferencePayloadBuilder,
    MintingBuilder,
)
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    media_withheld,
    require,
    require_session,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, SessionKind

K = RealtimeDispatchKind


# Terminal kinds: the status the call must be in, and the payload model.
_TERMINAL: dict[RealtimeDispatchKind, tuple[str, type[_CallEvent], str]] = {
    K.CALL_DECLINED: ("Declined", CallDeclined, "declined_at"),
    K.CALL_MISSED: ("Missed", CallMissed, "missed_at"),
    K.CALL_CANCELLED: ("Cancelled", CallCancelled, "cancelled_at"),
}


_LIVE = frozenset({"Ringing", "Active"})


class GroupCallPayloadBuilder(MintingBuilder):
    """The ``Conference`` shape of ``CallInvited`` / ``CallEnded``: ``ref_id`` = the
    conference, pushed to its chat."""

    kinds = frozenset({K.CALL_INVITED, K.CALL_ENDED})
    entity = ConferencePayloadBuilder.entity
    query = ConferencePayloadBuilder.query  # the same projection of the conference

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require(intent.kind in self.kinds, f"{intent.kind} is 1:1 only", "BadSessionKind")
        require_session(intent, record, expected=SessionKind.CONFERENCE)
        ids = {"call_id": record["id"], "conference_id": record["id"], "chat_id": record["chat_id"]}
        if intent.kind is K.CALL_INVITED:
            media = (
                self.minter.mint(record["room_name"], chat_id=record["chat_id"])
                if record["status"] == "Active" and not media_withheld(record)
                else None
            )
            return GroupCallInvited, dict(
                **ids,
                room_name=record["room_name"],
                started_by_user_id=record["started_by_user_id"],
                invited_at=record["started_at"],
                media=media,
            )
        require(record["status"] == "Ended", "call has not ended", "NotEnded")
        return GroupCallEnded, dict(
            **ids, ended_by_user_id=record["ended_by_user_id"], ended_at=record["ended_at"]
        )


class CallPayloadBuilder(RefProjectionBuilder):
    """Every call kind; ``Conference`` rows are handed to :class:`GroupCallPayloadBuilder`."""

    kinds = frozenset(
        {
            K.CALL_INVITED,
            K.CALL_ANSWERED,
            K.CALL_DECLINED,
            K.CALL_MISSED,
            K.CALL_CANCELLED,
            K.CALL_ENDED,
        }
    )
    entity = "Call"
    query = "calls"

    def __init__(
        self,
        minter: MediaMinter,
        *,
        sql: str | None,
        conference_sql: str | None,
        encoder: PayloadEncoder = FAST,
    ) -> None:
        """``sql``: the manifest's ``calls`` query; ``conference_sql``: its ``conferences``
        query, which the ``Conference`` rows read (either ``None``: those rows are disabled)."""
        super().__init__(sql=sql, encoder=encoder)
        self.minter = minter
        self.group = GroupCallPayloadBuilder(minter, sql=conference_sql, encoder=encoder)

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        group = [i for i in items if i.intent.session_kind is SessionKind.CONFERENCE]
        direct = [i for i in items if i.intent.session_kind is not SessionKind.CONFERENCE]
        # Two queries (calls, conferences): each one's failure stays with its own rows.
        results = (
            await build_apart(self.query, super().build(conn, direct), direct) if direct else {}
        )
        if group:
            results.update(
                await build_apart(self.group.query, self.group.build(conn, group), group)
            )
        return results

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_session(intent, record, expected=SessionKind.DIRECT)
        ids = {
            "call_id": record["id"],
            "caller_user_id": record["caller_user_id"],
            "callee_user_id": record["callee_user_id"],
        }
        kind = intent.kind
        if kind is K.CALL_INVITED:
            # A call that is already over gets no join credentials, nor one where a party has
            # blocked the other (the optional media_withheld column): whenever the row is read,
            # at its push, a retry or a sync replay. The parties ask /api/calls/{id}/media.
            media = (
                self.minter.mint(record["room_name"], user_id=intent.target_user_id)
                if record["status"] in _LIVE and not media_withheld(record)
                else None
            )
            return CallInvited, dict(
                **ids, room_name=record["room_name"], invited_at=record["created_at"], media=media
            )
        if kind is K.CALL_ANSWERED:
            require(record["answered_at"] is not None, "call was not answered", "NotAnswered")
            return CallAnswered, dict(**ids, answered_at=record["answered_at"])
        if kind is K.CALL_ENDED:
            require(record["status"] == "Ended", "call has not ended", "NotEnded")
            return CallEnded, dict(
                **ids, ended_by_user_id=record["ended_by_user_id"], ended_at=record["ended_at"]
            )
        status, model, field = _TERMINAL[kind]
        require(record["status"] == status, f"call is not {status}", f"Not{status}")
        return model, dict(**ids, **{field: record["ended_at"]})
