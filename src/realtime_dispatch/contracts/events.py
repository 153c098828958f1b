"""The published map from hub event name to its payload model: what a client parses an
invocation with, and what the dispatcher's projections must produce.

Event names are the outbox kinds in snake_case (``MessageReceived`` → ``message_received``).
``call_invited`` and ``call_ended`` have a second, group shape (a conference call pushed to
``chat:{chatId}``), told apart by its ``conferenceId`` field.
"""

from __future__ import annotations

from collections.abc import Mapping

from realtime_dispatch.contracts import (
    calls,
    chats,
    conferences,
    contacts,
    messages,
    recordings,
    screenshare,
)
from realtime_dispatch.contracts.base import Contract

EVENT_MODELS: Mapping[str, type[Contract]] = {
    "message_received": messages.MessageReceived,
    "message_edited": messages.MessageEdited,
    "message_deleted": messages.MessageDeleted,
    "read_receipt_updated": chats.ReadReceiptUpdated,
    "chat_updated": chats.ChatUpdated,
    "contact_request_received": contacts.ContactRequestReceived,
    "contact_request_accepted": contacts.ContactRequestAccepted,
    "contact_removed": contacts.ContactRemoved,
    "call_invited": calls.CallInvited,
    "call_answered": calls.CallAnswered,
    "call_declined": calls.CallDeclined,
    "call_missed": calls.CallMissed,
    "call_cancelled": calls.CallCancelled,
    "call_ended": calls.CallEnded,
    "conference_invited": conferences.ConferenceInvited,
    "conference_started": conferences.ConferenceStarted,
    "conference_ended": conferences.ConferenceEnded,
    "conference_participant_joined": conferences.ConferenceParticipantJoined,
    "conference_participant_left": conferences.ConferenceParticipantLeft,
    "recording_started": recordings.RecordingStarted,
    "recording_stopped": recordings.RecordingStopped,
    "recording_available": recordings.RecordingAvailable,
    "recording_failed": recordings.RecordingFailed,
    "screen_share_started": screenshare.ScreenShareStarted,
    "screen_share_stopped": screenshare.ScreenShareStopped,
    "blacklist_changed": contacts.BlacklistChanged,
}
"""Event name → the payload model of its 1:1 (or only) shape."""

GROUP_EVENT_MODELS: Mapping[str, type[Contract]] = {
    "call_invited": calls.GroupCallInvited,
    "call_ended": calls.GroupCallEnded,
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
