"""Call payloads on the wire: the 1:1 shapes (to ``user:``) and the group shapes
(``GroupCallInvited``, ``GroupCallEnded``, to ``chat:``)."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, PushPayload
from realtime_dispatch.contracts.media import MediaJoin


class _CallEvent(PushPayload):
    call_id: KeyId
    caller_user_id: KeyId
    callee_user_id: KeyId


class CallInvited(_CallEvent):
    room_name: str
    invited_at: datetime
    media: MediaJoin | None = None


class CallAnswered(_CallEvent):
    answered_at: datetime


class CallDeclined(_CallEvent):
    declined_at: datetime


class CallMissed(_CallEvent):
    missed_at: datetime


class CallCancelled(_CallEvent):
    cancelled_at: datetime


class CallEnded(_CallEvent):
    ended_by_user_id: KeyId | None = None
    ended_at: datetime


class GroupCallInvited(PushPayload):
    """``call_invited`` of a group call: one payload for every member of the chat."""

    call_id: KeyId
    conference_id: KeyId
    chat_id: KeyId
    room_name: str
    started_by_user_id: KeyId
    invited_at: datetime
    media: MediaJoin | None = None


class GroupCallEnded(PushPayload):
    call_id: KeyId
    conference_id: KeyId
    chat_id: KeyId
    ended_by_user_id: KeyId | None = None
    ended_at: datetime
