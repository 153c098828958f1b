"""``/api/contacts`` and ``/api/blacklist``."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path

from realtime_dispatch.contracts.messenger_rest import (
    BlockCreated,
    BlockedList,
    BlockedOut,
    ContactCreated,
    ContactList,
    ContactOut,
    ContactRequestCreated,
    ContactRequestList,
    ContactRequestOut,
    UserRef,
)
from realtime_dispatch.messenger import blacklist, contacts
from realtime_dispatch.messenger.api.deps import Conn, User
from realtime_dispatch.messenger.api.strict_json import StrictJsonRoute, no_content

router = APIRouter(prefix="/api", tags=["contacts", "blacklist"], route_class=StrictJsonRoute)

UserId = Annotated[UUID, Path(alias="userId")]
RequestId = Annotated[UUID, Path(alias="requestId")]


@router.get("/contacts", summary="The caller's contacts")
async def list_contacts(user: User, conn: Conn) -> ContactList:
    items = await contacts.list_contacts(conn, user=user)
    return ContactList(
        items=[ContactOut(contact_id=c.contact_id, user_id=c.user_id, since=c.since) for c in items]
    )


@router.get("/contacts/requests", summary="Pending contact requests, incoming and outgoing")
async def list_contact_requests(user: User, conn: Conn) -> ContactRequestList:
    items = await contacts.list_requests(conn, user=user)
    return ContactRequestList(
        items=[ContactRequestOut.model_validate(r, from_attributes=True) for r in items]
    )


@router.post("/contacts/requests", status_code=201, summary="Ask a user to become a contact")
async def request_contact(body: UserRef, user: User, conn: Conn) -> ContactRequestCreated:
    request_id = await contacts.request_contact(conn, requester=user, addressee=body.user_id)
    return ContactRequestCreated(request_id=request_id)


@router.post(
    "/contacts/requests/{requestId}/accept", status_code=201, summary="Accept (the addressee)"
)
async def accept_contact(request_id: RequestId, user: User, conn: Conn) -> ContactCreated:
    contact_id = await contacts.accept_contact(conn, request_id=request_id, actor=user)
    return ContactCreated(contact_id=contact_id)


@no_content(router.post, "/contacts/requests/{requestId}/decline", "Decline (the addressee)")
async def decline_contact(request_id: RequestId, user: User, conn: Conn) -> None:
    await contacts.decline_contact(conn, request_id=request_id, actor=user)


@no_content(router.delete, "/contacts/{userId}", "Remove a contact")
async def remove_contact(user_id: UserId, user: User, conn: Conn) -> None:
    await contacts.remove_contact(conn, actor=user, other=user_id)


@router.get("/blacklist", summary="Users the caller has blocked")
async def list_blocked(user: User, conn: Conn) -> BlockedList:
    items = await blacklist.list_blocked(conn, owner=user)
    return BlockedList(
        items=[BlockedOut(entry_id=b.entry_id, user_id=b.user_id, since=b.since) for b in items]
    )


@router.post("/blacklist", status_code=201, summary="Block a user")
async def block_user(body: UserRef, user: User, conn: Conn) -> BlockCreated:
    entry_id = await blacklist.block_user(conn, owner=user, blocked=body.user_id)
    return BlockCreated(entry_id=entry_id)


@no_content(router.delete, "/blacklist/{userId}", "Unblock a user")
async def unblock_user(user_id: UserId, user: User, conn: Conn) -> None:
    await blacklist.unblock_user(conn, owner=user, blocked=user_id)
