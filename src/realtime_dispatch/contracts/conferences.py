"""Conference payloads on the wire (to ``chat:{chatId}`` of the conference)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import PushPayload
from realtime_dispatch.contracts.media import MediaJoin


class ConferenceStarted(PushPayload):
    conference_id: UUID
    chat_id: UUID
    room_name: str
    started_by_user_id: UUID
    started_at: datetime
    media: MediaJoin | None = None


class ConferenceEnded(PushPayload):
    conference_id: UUID
    chat_id: UUID
    ended_by_user_id: UUID | None = None
    ended_at: datetime


class ConferenceInvited(PushPayload):
    conference_id: UUID
    chat_id: UUID
    room_name: str
    invited_user_id: UUID
    invited_by_user_id: UUID | None = None
    invited_at: datetime
    media: MediaJoin | None = None


class ConferenceParticipantJoined(PushPayload):
    conference_id: UUID
    chat_id: UUID
    user_id: UUID
    joined_at: datetime


class ConferenceParticipantLeft(PushPayload):
    conference_id: UUID
    chat_id: UUID
    user_id: UUID
    left_at: datetime
