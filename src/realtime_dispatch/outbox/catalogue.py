"""The built-in kinds as one table, in the form an app declares its own (``-- kind:`` blocks
of the manifest): one row per kind with its target, its hub event, its payload contract and the
manifest query (or builder) that builds it.

What follows from this table or is checked against it (``tests/unit/test_catalogue.py``): the
:class:`~realtime_dispatch.outbox.model.RealtimeDispatchKind` enum, the kind registry's built-in
rows (``messenger.realtime_kinds``, written by the migration and by every process that starts),
the manifest contract's ``serves`` lists, the contracts' event map, the TypeScript SDK's
generated event list, the Python SDK's event list, and docs/api.md's event table.

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    kind: str
    target: str
    """``chat`` (group ``chat:{chatId}``), ``user`` (``user:{targetUserId}``) or ``session``
    (the row's ``session_kind``: Direct → the user, Conference → the chat)."""
    contract: str
    """The payload model's name in :mod:`realtime_dispatch.contracts`."""
    query: str
    """The manifest query its builder reads."""

    @property
    def event(self) -> str:
        """The hub event: the kind in snake_case."""
        return "".join(f"_{c.lower()}" if c.isupper() else c for c in self.kind).lstrip("_")

    @property
    def target_kind(self) -> str | None:
        """The outbox ``target_kind`` every row of the kind has (None: per row)."""
        return {"chat": "ChatGroup", "user": "User"}.get(self.target)


def _rows(table: str) -> tuple[CatalogueEntry, ...]:
    return tuple(
        CatalogueEntry(*line.split()) for line in table.strip().splitlines() if line.strip()
    )


# kind                          target   contract                      query
CATALOGUE: tuple[CatalogueEntry, ...] = _rows("""
MessageReceived                 chat     MessageReceived               messages
MessageEdited                   chat     MessageEdited                 messages
MessageDeleted                  chat     MessageDeleted                messages
ReadReceiptUpdated              chat     ReadReceiptUpdated            read_receipts
ChatUpdated                     chat     ChatUpdated                   chat_events
ContactRequestReceived          user     ContactRequestReceived        contact_requests
ContactRequestAccepted          user     ContactRequestAccepted        contacts
ContactRemoved                  user     ContactRemoved                contacts
CallInvited                     session  CallInvited                   calls
CallAnswered                    session  CallAnswered                  calls
CallDeclined                    session  CallDeclined                  calls
CallMissed                      session  CallMissed                    calls
CallCancelled                   session  CallCancelled                 calls
CallEnded                       session  CallEnded                     calls
ConferenceInvited               session  ConferenceInvited             conference_participants
ConferenceStarted               session  ConferenceStarted             conferences
ConferenceEnded                 session  ConferenceEnded               conferences
ConferenceParticipantJoined     session  ConferenceParticipantJoined   conference_participants
ConferenceParticipantLeft       session  ConferenceParticipantLeft     conference_participants
RecordingStarted                session  RecordingStarted              recordings
RecordingStopped                session  RecordingStopped              recordings
RecordingAvailable              session  RecordingAvailable            recordings
RecordingFailed                 session  RecordingFailed               recordings
ScreenShareStarted              session  ScreenShareStarted            screen_shares
ScreenShareStopped              session  ScreenShareStopped            screen_shares
BlacklistChanged                user     BlacklistChanged              blacklist
""")

BY_KIND = {entry.kind: entry for entry in CATALOGUE}
