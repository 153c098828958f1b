"""Contact and blacklist payloads on the wire (to ``user:{targetUserId}``): ids, status and
times only."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from realtime_dispatch.contracts.base import PushPayload


class ContactRequestReceived(PushPayload):
    request_id: UUID
    from_user_id: UUID
    to_user_id: UUID
    status: str
    created_at: datetime


class ContactRequestAccepted(PushPayload):
    contact_id: UUID
    request_id: UUID | None = None
    accepted_by_user_id: UUID
    accepted_at: datetime


class ContactRemoved(PushPayload):
    contact_id: UUID
    removed_by_user_id: UUID
    removed_at: datetime


class BlacklistChanged(PushPayload):
    entry_id: UUID
    blocked_user_id: UUID
    blocked: bool
    changed_at: datetime
