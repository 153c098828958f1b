"""Contact and blacklist payloads on the wire (to ``user:{targetUserId}``): ids, status and
times only."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import KeyId, PushPayload


class ContactRequestReceived(PushPayload):
    request_id: KeyId
    from_user_id: KeyId
    to_user_id: KeyId
    status: str
    created_at: datetime


class ContactRequestAccepted(PushPayload):
    contact_id: KeyId
    request_id: KeyId | None = None
    accepted_by_user_id: KeyId
    accepted_at: datetime


class ContactRemoved(PushPayload):
    contact_id: KeyId
    removed_by_user_id: KeyId
    removed_at: datetime


class BlacklistChanged(PushPayload):
    entry_id: KeyId
    blocked_user_id: KeyId
    blocked: bool
    changed_at: datetime
