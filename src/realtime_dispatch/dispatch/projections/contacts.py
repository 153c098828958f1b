"""Contact request, contact and blacklist rows → payloads, each row checked against the users
allowed to see the entity."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.contracts.contacts import (
    BlacklistChanged,
    ContactRemoved,
    ContactRequestAccepted,
    ContactRequestReceived,
)
from realtime_dispatch.dispatch.projections.encoding import Shaped
from realtime_dispatch.dispatch.projections.projection import (
    RefProjectionBuilder,
    require,
    require_user,
)
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind

K = RealtimeDispatchKind


class ContactRequestBuilder(RefProjectionBuilder):
    """``ContactRequestReceived``: ``ref_id`` = the request; only its addressee receives it."""

    kinds = frozenset({K.CONTACT_REQUEST_RECEIVED})
    entity = "ContactRequest"
    query = "contact_requests"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_user(intent, record["addressee_user_id"])
        return ContactRequestReceived, {
            "request_id": record["id"],
            "from_user_id": record["requester_user_id"],
            "to_user_id": record["addressee_user_id"],
            "status": record["status"],
            "created_at": record["created_at"],
        }


class ContactBuilder(RefProjectionBuilder):
    """``ContactRequestAccepted`` (to the requester) and ``ContactRemoved`` (to the party that
    did not remove it); ``ref_id`` = the contact."""

    kinds = frozenset({K.CONTACT_REQUEST_ACCEPTED, K.CONTACT_REMOVED})
    entity = "Contact"
    query = "contacts"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        pair = (record["user_low"], record["user_high"])
        if intent.kind is K.CONTACT_REQUEST_ACCEPTED:
            accepter = record["accepted_by_user_id"]
            require_user(intent, *(u for u in pair if u != accepter))
            return ContactRequestAccepted, {
                "contact_id": record["id"],
                "request_id": record["request_id"],
                "accepted_by_user_id": accepter,
                "accepted_at": record["created_at"],
            }
        remover = record["removed_by_user_id"]
        require(record["removed_at"] is not None, "contact was not removed", "NotRemoved")
        require_user(intent, *(u for u in pair if u != remover))
        return ContactRemoved, {
            "contact_id": record["id"],
            "removed_by_user_id": remover,
            "removed_at": record["removed_at"],
        }


class BlacklistBuilder(RefProjectionBuilder):
    """``BlacklistChanged``: ``ref_id`` = the blacklist entry; only its owner receives it (the
    current state: ``blocked`` is false once the entry was lifted)."""

    kinds = frozenset({K.BLACKLIST_CHANGED})
    entity = "BlacklistEntry"
    query = "blacklist"

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_user(intent, record["owner_user_id"])
        removed = record["removed_at"]
        return BlacklistChanged, {
            "entry_id": record["id"],
            "blocked_user_id": record["blocked_user_id"],
            "blocked": removed is None,
            "changed_at": removed or record["created_at"],
        }
