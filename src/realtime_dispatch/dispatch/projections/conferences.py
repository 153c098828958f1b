"""Conference rows → payloads (``session_kind = Conference``, to ``chat:{chatId}`` of the
conference's own chat). ``conference_started`` and ``conference_invited`` carry the media
join, minted for the chat while the conference is live.

``conference_invited`` also has the ``Direct`` shape: a personal invitation to
``user:{invitedUserId}`` (only the invited user), with the media join minted for that user."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.contracts.conferences import (
    ConferenceEnded,
    ConferenceInvited,
    ConferenceParticipantJoined,
    ConferenceParticipantLeft,
    ConferenceStarted,
)
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    media_withheld,
    require,
    require_session,
    require_user,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, SessionKind

K = RealtimeDispatchKind


class MintingBuilder(RefProjectionBuilder):
    """A builder whose payloads carry a media join, minted at delivery by ``minter``."""

    def __init__(
        self, minter: MediaMinter, *, sql: str | None, encoder: PayloadEncoder = FAST
    ) -> None:
        super().__init__(sql=sql, encoder=encoder)
        self.minter = minter


class ConferencePayloadBuilder(MintingBuilder):
    """``ConferenceStarted`` / ``ConferenceEnded``: ``ref_id`` = the conference."""

    kinds = frozenset({K.CONFERENCE_STARTED, K.CONFERENCE_ENDED})
    entity = "Conference"
    query = "conferences"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_session(intent, record, expected=SessionKind.CONFERENCE)
        if intent.kind is K.CONFERENCE_STARTED:
            live = record["status"] == "Active"
            return ConferenceStarted, {
                "conference_id": record["id"],
                "chat_id": record["chat_id"],
                "room_name": record["room_name"],
                "started_by_user_id": record["started_by_user_id"],
                "started_at": record["started_at"],
                "media": self.minter.mint(record["room_name"], chat_id=record["chat_id"])
                if live and not media_withheld(record)
                else None,
            }
        require(record["status"] == "Ended", "conference has not ended", "NotEnded")
        return ConferenceEnded, {
            "conference_id": record["id"],
            "chat_id": record["chat_id"],
            "ended_by_user_id": record["ended_by_user_id"],
            "ended_at": record["ended_at"],
        }


class RosterPayloadBuilder(MintingBuilder):
    """``ConferenceInvited`` / ``…ParticipantJoined`` / ``…ParticipantLeft``: ``ref_id`` = the
    roster entry (``messenger.conference_participants``)."""

    kinds = frozenset(
        {K.CONFERENCE_INVITED, K.CONFERENCE_PARTICIPANT_JOINED, K.CONFERENCE_PARTICIPANT_LEFT}
    )
    entity = "RosterEntry"
    query = "conference_participants"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        personal = intent.kind is K.CONFERENCE_INVITED and intent.session_kind is SessionKind.DIRECT
        if personal:
            require_user(intent, record["user_id"])  # the invited user only
        else:
            require_session(intent, record, expected=SessionKind.CONFERENCE)
        ids = {
            "conference_id": record["conference_id"],
            "chat_id": record["chat_id"],
        }
        if intent.kind is K.CONFERENCE_INVITED:
            require(record["invited_at"] is not None, "user was not invited", "NotInvited")
            live = record["conference_status"] == "Active"
            media = None
            if live and not media_withheld(record):
                media = (
                    self.minter.mint(record["room_name"], user_id=record["user_id"])
                    if personal
                    else self.minter.mint(record["room_name"], chat_id=record["chat_id"])
                )
            return ConferenceInvited, dict(
                **ids,
                room_name=record["room_name"],
                invited_user_id=record["user_id"],
                invited_by_user_id=record["invited_by_user_id"],
                invited_at=record["invited_at"],
                media=media,
            )
        if intent.kind is K.CONFERENCE_PARTICIPANT_JOINED:
            require(record["joined_at"] is not None, "user never joined", "NotJoined")
            return ConferenceParticipantJoined, dict(
                **ids, user_id=record["user_id"], joined_at=record["joined_at"]
            )
        require(record["left_at"] is not None, "user has not left", "NotLeft")
        return ConferenceParticipantLeft, dict(
            **ids, user_id=record["user_id"], left_at=record["left_at"]
        )
