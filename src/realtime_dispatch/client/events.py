"""Typed hub events: the server's own wire contracts (``realtime_dispatch.contracts``), one per
event name, parsed from an invocation's single argument.

Fields the SDK does not know (a newer server) are dropped before validation, so an added field
never breaks an older client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from realtime_dispatch.client.errors import HubProtocolError
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
from realtime_dispatch.outbox.model import RealtimeDispatchKind as Kind

E = TypeVar("E", bound=Contract)

MODELS: Mapping[Kind, type[Contract]] = {
    Kind.MESSAGE_RECEIVED: MessageReceived,
    Kind.MESSAGE_EDITED: MessageEdited,
    Kind.MESSAGE_DELETED: MessageDeleted,
    Kind.READ_RECEIPT_UPDATED: ReadReceiptUpdated,
    Kind.CHAT_UPDATED: ChatUpdated,
    Kind.CONTACT_REQUEST_RECEIVED: ContactRequestReceived,
    Kind.CONTACT_REQUEST_ACCEPTED: ContactRequestAccepted,
    Kind.CONTACT_REMOVED: ContactRemoved,
    Kind.CALL_INVITED: CallInvited,
    Kind.CALL_ANSWERED: CallAnswered,
    Kind.CALL_DECLINED: CallDeclined,
    Kind.CALL_MISSED: CallMissed,
    Kind.CALL_CANCELLED: CallCancelled,
    Kind.CALL_ENDED: CallEnded,
    Kind.CONFERENCE_INVITED: ConferenceInvited,
    Kind.CONFERENCE_STARTED: ConferenceStarted,
    Kind.CONFERENCE_ENDED: ConferenceEnded,
    Kind.CONFERENCE_PARTICIPANT_JOINED: ConferenceParticipantJoined,
    Kind.CONFERENCE_PARTICIPANT_LEFT: ConferenceParticipantLeft,
    Kind.RECORDING_STARTED: RecordingStarted,
    Kind.RECORDING_STOPPED: RecordingStopped,
    Kind.RECORDING_AVAILABLE: RecordingAvailable,
    Kind.RECORDING_FAILED: RecordingFailed,
    Kind.SCREEN_SHARE_STARTED: ScreenShareStarted,
    Kind.SCREEN_SHARE_STOPPED: ScreenShareStopped,
    Kind.BLACKLIST_CHANGED: BlacklistChanged,
}
# The group (``session_kind = Conference``) shape of an event, tried when the 1:1 one fails.
GROUP_MODELS: Mapping[str, type[Contract]] = {
    Kind.CALL_INVITED.event_name: GroupCallInvited,
    Kind.CALL_ENDED.event_name: GroupCallEnded,
}
BY_EVENT_NAME: Mapping[str, type[Contract]] = {k.event_name: m for k, m in MODELS.items()}
EVENT_NAME: Mapping[type[Contract], str] = {m: k.event_name for k, m in MODELS.items()}


def _wire_names(model: type[Contract]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in model.model_fields.items())


_KNOWN_FIELDS = {model: _wire_names(model) for model in (*MODELS.values(), *GROUP_MODELS.values())}


def parse_event(target: str, arguments: tuple[Any, ...]) -> Contract | None:
    """The typed event of an invocation; ``None`` for an event name this SDK does not know."""
    model = BY_EVENT_NAME.get(target)
    if model is None:
        return None
    if len(arguments) != 1 or not isinstance(arguments[0], dict):
        raise HubProtocolError(f"{target}: expected one object argument")
    group = GROUP_MODELS.get(target)
    if group is not None and "conferenceId" in arguments[0]:
        model = group
    known = _KNOWN_FIELDS[model]
    payload = {k: v for k, v in arguments[0].items() if k in known}
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise HubProtocolError(f"{target}: payload does not match its contract") from exc


__all__ = [
    "BY_EVENT_NAME",
    "EVENT_NAME",
    "MODELS",
    "BlacklistChanged",
    "CallAnswered",
    "CallCancelled",
    "CallDeclined",
    "CallEnded",
    "CallInvited",
    "CallMissed",
    "ChatUpdated",
    "ConferenceEnded",
    "ConferenceInvited",
    "ConferenceParticipantJoined",
    "ConferenceParticipantLeft",
    "ConferenceStarted",
    "ContactRemoved",
    "ContactRequestAccepted",
    "ContactRequestReceived",
    "GroupCallEnded",
    "GroupCallInvited",
    "MessageDeleted",
    "MessageEdited",
    "MessageReceived",
    "ReadReceiptUpdated",
    "RecordingAvailable",
    "RecordingFailed",
    "RecordingStarted",
    "RecordingStopped",
    "ScreenShareStarted",
    "ScreenShareStopped",
    "parse_event",
]
