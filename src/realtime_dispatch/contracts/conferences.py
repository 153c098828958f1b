"""Conference payloads on the wire (to ``chat:{chatId}`` of the conference)."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, PushPayload
from realtime_dispatch.contracts.media import MediaJoin


class ConferenceStarted(PushPayload):
    conference_id: KeyId
    chat_id: KeyId
    room_name: str
    started_by_user_id: KeyId
    started_at: datetime
    media: MediaJoin | None = None


class ConferenceEnded(PushPayload):
    conference_id: KeyId
    chat_id: KeyId
    ended_by_user_id: KeyId | None = None
    ended_at: datetime


class ConferenceInvited(PushPayload):
    conference_id: KeyId
    chat_id: KeyId
    room_name: str
    invited_user_id: KeyId
    invited_by_user_id: KeyId | None = None
    invited_at: datetime
    media: MediaJoin | None = None


class ConferenceParticipantJoined(PushPayload):
    conference_id: KeyId
    chat_id: KeyId
    user_id: KeyId
    joined_at: datetime


class ConferenceParticipantLeft(PushPayload):
    conference_id: KeyId
    chat_id: KeyId
    user_id: KeyId
    left_at: datetime
