"""The published map from hub event name to its payload model: what a client parses an
invocation with, and what the dispatcher's projections must produce.

Event names are the outbox kinds in snake_case (``MessageReceived`` → ``message_received``).
``call_invited`` and ``call_ended`` have a second, group shape (a conference call pushed to
``chat:{chatId}``), told apart by its ``conferenceId`` field.
"""

from __future__ import annotations

from collections.abc import Mapping

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.contracts.calls import (
    CallAnswered,
    CallCancelled,
    CallDeclined,
    CallEnded,
    CallInvited,
    CallMissed,
    GroupCallEnded,
    GroupCallInvited,
)
from realtime_dispatch.contracts.chats import ChatUpdated, ReadReceiptUpdated
from realtime_dispatch.contracts.conferences import (
    ConferenceEnded,
    ConferenceInvited,
    ConferenceParticipantJoined,
    ConferenceParticipantLeft,
    ConferenceStarted,
)
from realtime_dispatch.contracts.contacts import (
    BlacklistChanged,
    ContactRemoved,
    ContactRequestAccepted,
    ContactRequestReceived,
)
from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.contracts.recordings import (
    RecordingAvailable,
    RecordingFailed,
    RecordingStarted,
    RecordingStopped,
)
from realtime_dispatch.contracts.screenshare import ScreenShareStarted, ScreenShareStopped

EVENT_MODELS: Mapping[str, type[Contract]] = {
    "message_received": MessageReceived,
    "message_edited": MessageEdited,
    "message_deleted": MessageDeleted,
    "read_receipt_updated": ReadReceiptUpdated,
    "chat_updated": ChatUpdated,
    "contact_request_received": ContactRequestReceived,
    "contact_request_accepted": ContactRequestAccepted,
    "contact_removed": ContactRemoved,
    "call_invited": CallInvited,
    "call_answered": CallAnswered,
    "call_declined": CallDeclined,
    "call_missed": CallMissed,
    "call_cancelled": CallCancelled,
    "call_ended": CallEnded,
    "conference_invited": ConferenceInvited,
    "conference_started": ConferenceStarted,
    "conference_ended": ConferenceEnded,
    "conference_participant_joined": ConferenceParticipantJoined,
    "conference_participant_left": ConferenceParticipantLeft,
    "recording_started": RecordingStarted,
    "recording_stopped": RecordingStopped,
    "recording_available": RecordingAvailable,
    "recording_failed": RecordingFailed,
    "screen_share_started": ScreenShareStarted,
    "screen_share_stopped": ScreenShareStopped,
    "blacklist_changed": BlacklistChanged,
}
"""Event name → the payload model of its 1:1 (or only) shape."""

GROUP_EVENT_MODELS: Mapping[str, type[Contract]] = {
    "call_invited": GroupCallInvited,
    "call_ended": GroupCallEnded,
}
"""Event name → the payload model of its group shape (``session_kind = Conference``)."""

GROUP_SHAPE_FIELD = "conferenceId"
"""The wire field present only in a group shape."""


def event_model(event: str, payload: Mapping[str, object]) -> type[Contract] | None:
    """The model an invocation's payload is parsed with; ``None`` for an unknown event."""
    group = GROUP_EVENT_MODELS.get(event)
    if group is not None and GROUP_SHAPE_FIELD in payload:
        return group
    return EVENT_MODELS.get(event)
