"""The built-in kinds as one table, in the form an app declares its own (``-- kind:`` blocks
of the manifest): one row per kind with its target, the ids its rows carry, its payload
contract and its builder (the manifest query its builder reads, or ``ids``: the row's own ids).

Follows from this table: the routing rule of :mod:`realtime_dispatch.outbox.model` (which ids
and which target a kind's row needs), the hub event (the kind in snake_case, unless the row
says ``event=``), the contracts' event map (:data:`realtime_dispatch.contracts.events.EVENT_MODELS`,
and so the Python SDK's events and the TypeScript SDK's generated ``contracts.ts``), the kind
registry's built-in rows (``messenger.realtime_kinds``, written by the migration and by every
process that starts), the manifest contract's ``serves`` lists, and the payload builder of a
kind with no builder of its own (an ``ids`` kind, or one whose contract's fields are its
query's columns). Checked against it by ``tests/unit/test_catalogue.py``: the enum below
(beside its rows, in their order), the shipped builders' kinds and docs/api.md's event table.

Adding a built-in kind: see docs/architecture.md, "Adding a built-in kind".

Pure data: the bottom layer, imported by ``outbox`` and ``contracts`` alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

TARGETS = frozenset({"chat", "user", "session"})
IDS = frozenset({"message", "ref"})
IDS_ONLY = "ids"
"""The builder of a kind whose payload is its row's own ids (no query)."""


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    kind: str
    target: str
    """``chat`` (group ``chat:{chatId}``), ``user`` (``user:{targetUserId}``) or ``session``
    (the row's ``session_kind``: Direct → the user, Conference → the chat)."""
    ids: str
    """What a row of the kind carries: ``message`` (``message_id`` and ``seq``) or ``ref``
    (``ref_id``; a ``session`` kind also its ``session_kind``)."""
    contract: str
    """The payload model: ``module.Class`` in :mod:`realtime_dispatch.contracts` (the table
    names the module; the class is the kind's name unless the row says ``contract=``)."""
    builder: str
    """The manifest query its builder reads, or ``ids`` (the payload is the row's ids)."""
    event_override: str | None = None

    @property
    def event(self) -> str:
        """The hub event: the kind in snake_case, unless the row names another."""
        return self.event_override or snake(self.kind)

    @property
    def query(self) -> str | None:
        """The manifest query that builds the payload (``None``: ids only)."""
        return None if self.builder == IDS_ONLY else self.builder

    @property
    def target_kind(self) -> str | None:
        """The outbox ``target_kind`` every row of the kind has (None: per row)."""
        return {"chat": "ChatGroup", "user": "User"}.get(self.target)


def snake(name: str) -> str:
    """``MessageReceived`` → ``message_received``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _rows(table: str) -> tuple[CatalogueEntry, ...]:
    out = []
    for line in filter(None, (raw.strip() for raw in table.splitlines())):
        kind, target, ids, module, builder, *rest = line.split()
        extra = dict(word.split("=", 1) for word in rest)
        if target not in TARGETS or ids not in IDS or set(extra) - {"event", "contract"}:
            raise ValueError(f"catalogue row {kind}: bad target, ids or option")
        contract = f"{module}.{extra.get('contract', kind)}"
        out.append(CatalogueEntry(kind, target, ids, contract, builder, extra.get("event")))
    return tuple(out)


# kind                      target  ids     contract    builder       (options: event=, contract=)
CATALOGUE: tuple[CatalogueEntry, ...] = _rows("""
MessageReceived             chat    message messages    messages
MessageEdited               chat    message messages    messages
MessageDeleted              chat    message messages    messages
ReadReceiptUpdated          chat    ref     chats       read_receipts
ChatUpdated                 chat    ref     chats       chat_events
ContactRequestReceived      user    ref     contacts    contact_requests
ContactRequestAccepted      user    ref     contacts    contacts
ContactRemoved              user    ref     contacts    contacts
CallInvited                 session ref     calls       calls
CallAnswered                session ref     calls       calls
CallDeclined                session ref     calls       calls
CallMissed                  session ref     calls       calls
CallCancelled               session ref     calls       calls
CallEnded                   session ref     calls       calls
ConferenceInvited           session ref     conferences conference_participants
ConferenceStarted           session ref     conferences conferences
ConferenceEnded             session ref     conferences conferences
ConferenceParticipantJoined session ref     conferences conference_participants
ConferenceParticipantLeft   session ref     conferences conference_participants
RecordingStarted            session ref     recordings  recordings
RecordingStopped            session ref     recordings  recordings
RecordingAvailable          session ref     recordings  recordings
RecordingFailed             session ref     recordings  recordings
ScreenShareStarted          session ref     screenshare screen_shares
ScreenShareStopped          session ref     screenshare screen_shares
BlacklistChanged            user    ref     contacts    blacklist
""")

BY_KIND = {entry.kind: entry for entry in CATALOGUE}


class RealtimeDispatchKind(StrEnum):
    """The built-in kinds, as the code names them: one member per row of :data:`CATALOGUE`,
    in its order (a test fails on any difference). Kept as a class so that the members are
    static names for the type checker; everything else about a kind is read from its row."""

    MESSAGE_RECEIVED = "MessageReceived"
    MESSAGE_EDITED = "MessageEdited"
    MESSAGE_DELETED = "MessageDeleted"
    READ_RECEIPT_UPDATED = "ReadReceiptUpdated"
    CHAT_UPDATED = "ChatUpdated"
    CONTACT_REQUEST_RECEIVED = "ContactRequestReceived"
    CONTACT_REQUEST_ACCEPTED = "ContactRequestAccepted"
    CONTACT_REMOVED = "ContactRemoved"
    CALL_INVITED = "CallInvited"
    CALL_ANSWERED = "CallAnswered"
    CALL_DECLINED = "CallDeclined"
    CALL_MISSED = "CallMissed"
    CALL_CANCELLED = "CallCancelled"
    CALL_ENDED = "CallEnded"
    CONFERENCE_INVITED = "ConferenceInvited"
    CONFERENCE_STARTED = "ConferenceStarted"
    CONFERENCE_ENDED = "ConferenceEnded"
    CONFERENCE_PARTICIPANT_JOINED = "ConferenceParticipantJoined"
    CONFERENCE_PARTICIPANT_LEFT = "ConferenceParticipantLeft"
    RECORDING_STARTED = "RecordingStarted"
    RECORDING_STOPPED = "RecordingStopped"
    RECORDING_AVAILABLE = "RecordingAvailable"
    RECORDING_FAILED = "RecordingFailed"
    SCREEN_SHARE_STARTED = "ScreenShareStarted"
    SCREEN_SHARE_STOPPED = "ScreenShareStopped"
    BLACKLIST_CHANGED = "BlacklistChanged"

    @property
    def entry(self) -> CatalogueEntry:
        """The kind's row."""
        return BY_KIND[self.value]

    @property
    def event_name(self) -> str:
        """The hub event (``MessageReceived`` → ``message_received``)."""
        return BY_KIND[self.value].event

    @property
    def is_message(self) -> bool:
        return BY_KIND[self.value].ids == "message"

    @property
    def is_media(self) -> bool:
        return BY_KIND[self.value].target == "session"
