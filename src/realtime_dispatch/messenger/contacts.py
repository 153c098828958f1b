"""Contacts: request, accept, remove. Pushes go to the other user's ``user:`` group:
``ContactRequestReceived`` (to the addressee, ``ref_id`` = request), ``ContactRequestAccepted``
(to the requester, ``ref_id`` = contact), ``ContactRemoved`` (to the other party, ``ref_id`` =
contact)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.access import insert_unique, refuse_to_reach
from realtime_dispatch.messenger.refusals import Conflict, Forbidden, NotFound
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind
from realtime_dispatch.values.ids import new_id


@dataclass(frozen=True, slots=True)
class ContactView:
    contact_id: UUID
    user_id: UUID
    since: datetime


def _pair(a: UUID, b: UUID) -> tuple[UUID, UUID]:
    return (a, b) if a < b else (b, a)


def _to_user(kind: RealtimeDispatchKind, user: UUID, ref_id: UUID) -> OutboxIntent:
    return OutboxIntent(
        kind=kind, target_kind=RealtimeTargetKind.USER, target_user_id=user, ref_id=ref_id
    )


_ACTIVE_CONTACT_SQL = """
SELECT id FROM messenger.contacts
WHERE user_low = $1 AND user_high = $2 AND removed_at IS NULL
"""


async def request_contact(conn: DbConnection, *, requester: UUID, addressee: UUID) -> UUID:
    request_id = new_id()
    async with conn.transaction():
        await refuse_to_reach(
            conn, actor=requester, other=addressee, yourself="you cannot add yourself as a contact"
        )
        if await conn.fetchval(_ACTIVE_CONTACT_SQL, *_pair(requester, addressee)) is not None:
            raise Conflict("already a contact")
        reverse = await conn.fetchval(
            "SELECT 1 FROM messenger.contact_requests WHERE requester_user_id = $1"
            " AND addressee_user_id = $2 AND status = 'Pending'",
            addressee,
            requester,
        )
        if reverse is not None:
            raise Conflict("the user has already sent you a request: accept it")
        await insert_unique(
            conn,
            "a request is already pending",
            "INSERT INTO messenger.contact_requests (id, requester_user_id, addressee_user_id)"
            " VALUES ($1, $2, $3)",
            request_id,
            requester,
            addressee,
        )
        await enqueue(
            conn, _to_user(RealtimeDispatchKind.CONTACT_REQUEST_RECEIVED, addressee, request_id)
        )
    return request_id


async def _pending_request(conn: DbConnection, request_id: UUID, actor: UUID, verb: str) -> UUID:
    """Lock a pending request addressed to ``actor``; its requester."""
    request = await conn.fetchrow(
        "SELECT requester_user_id, addressee_user_id, status FROM messenger.contact_requests"
        " WHERE id = $1 FOR UPDATE",
        request_id,
    )
    if request is None or actor not in (
        request["requester_user_id"],
        request["addressee_user_id"],
    ):
        raise NotFound("contact request not found")
    if actor != request["addressee_user_id"]:
        raise Forbidden(f"only the addressee may {verb} a request")
    if request["status"] != "Pending":
        raise Conflict("the request is no longer pending")
    return request["requester_user_id"]  # type: ignore[no-any-return]


async def accept_contact(conn: DbConnection, *, request_id: UUID, actor: UUID) -> UUID:
    """The addressee accepts a pending request; returns the new contact id."""
    async with conn.transaction():
        requester = await _pending_request(conn, request_id, actor, "accept")
        await conn.execute(
            "UPDATE messenger.contact_requests SET status = 'Accepted', responded_at = now()"
            " WHERE id = $1",
            request_id,
        )
        contact_id = new_id()
        low, high = _pair(requester, actor)
        await insert_unique(
            conn,
            "already a contact",
            "INSERT INTO messenger.contacts"
            " (id, user_low, user_high, request_id, accepted_by_user_id)"
            " VALUES ($1, $2, $3, $4, $5)",
            contact_id,
            low,
            high,
            request_id,
            actor,
        )
        await enqueue(
            conn, _to_user(RealtimeDispatchKind.CONTACT_REQUEST_ACCEPTED, requester, contact_id)
        )
    return contact_id


async def remove_contact(conn: DbConnection, *, actor: UUID, other: UUID) -> UUID:
    async with conn.transaction():
        contact_id = await conn.fetchval(
            "UPDATE messenger.contacts SET removed_at = now(), removed_by_user_id = $3"
            " WHERE user_low = $1 AND user_high = $2 AND removed_at IS NULL RETURNING id",
            *_pair(actor, other),
            actor,
        )
        if contact_id is None:
            raise NotFound("not a contact")
        await enqueue(conn, _to_user(RealtimeDispatchKind.CONTACT_REMOVED, other, contact_id))
    return contact_id  # type: ignore[no-any-return]


async def list_contacts(conn: DbConnection, *, user: UUID) -> list[ContactView]:
    rows = await conn.fetch(
        "SELECT id, CASE WHEN user_low = $1 THEN user_high ELSE user_low END AS other,"
        " created_at FROM messenger.contacts"
        " WHERE (user_low = $1 OR user_high = $1) AND removed_at IS NULL ORDER BY created_at",
        user,
    )
    return [ContactView(r["id"], r["other"], r["created_at"]) for r in rows]


@dataclass(frozen=True, slots=True)
class ContactRequestView:
    request_id: UUID
    from_user_id: UUID
    to_user_id: UUID
    created_at: datetime


async def list_requests(conn: DbConnection, *, user: UUID) -> list[ContactRequestView]:
    """Pending requests to and from ``user``, oldest first."""
    rows = await conn.fetch(
        "SELECT id, requester_user_id, addressee_user_id, created_at"
        " FROM messenger.contact_requests"
        " WHERE (requester_user_id = $1 OR addressee_user_id = $1) AND status = 'Pending'"
        " ORDER BY created_at, id",
        user,
    )
    return [
        ContactRequestView(r["id"], r["requester_user_id"], r["addressee_user_id"], r["created_at"])
        for r in rows
    ]


async def decline_contact(conn: DbConnection, *, request_id: UUID, actor: UUID) -> None:
    """The addressee declines a pending request. No push: the spec has no kind for it; the
    requester sees it leave ``GET /api/contacts/requests``."""
    async with conn.transaction():
        await _pending_request(conn, request_id, actor, "decline")
        await conn.execute(
            "UPDATE messenger.contact_requests SET status = 'Declined', responded_at = now()"
            " WHERE id = $1",
            request_id,
        )
