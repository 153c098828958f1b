"""The messenger REST API as the client uses it (httpx): history pages for resync, the
caller's chats, and the commands a chat client sends. Answers are parsed with the server's own
response schemas.

A send carries a ``clientMessageId`` made here and reused when the send is retried after a
transport error or a 5xx, so a send whose answer was lost is never made twice."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

import httpx
from pydantic import BaseModel

from realtime_dispatch.contracts.messenger_rest import (
    ChatCreated,
    ChatOut,
    ChatPage,
    ChatSummaryOut,
    MessageEditedReply,
    MessageOut,
    MessageSent,
)
from realtime_dispatch.contracts.sync import SyncPageOut
from realtime_dispatch_client.exceptions import RestError
from realtime_dispatch_client.timeline import TimelineMessage

PAGE_LIMIT = 200  # the API's maximum page
SYNC_LIMIT = 500  # events per sync page (the API allows 1,000)
SEND_ATTEMPTS = 3
M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], data: Mapping[str, Any]) -> M:
    """Validate ``data`` against ``model``, ignoring fields a newer server added."""
    known = {field.alias or name for name, field in model.model_fields.items()}
    return model.model_validate({k: v for k, v in data.items() if k in known})


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is not used by this server)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def to_timeline(chat_id: UUID, item: MessageOut) -> TimelineMessage:
    return TimelineMessage(
        chat_id=chat_id,
        message_id=item.message_id,
        seq=item.seq,
        sender_user_id=item.sender_user_id,
        body=item.body,
        sent_at=item.sent_at,
        edited_at=item.edited_at,
        deleted_at=item.deleted_at,
        kind=item.kind,
        file_meta=item.file_meta,
        card_text=item.card_text,
    )


class MessengerRest:
    """Calls on behalf of one user (the bearer token). The ``httpx.AsyncClient`` is the
    caller's: whoever opened it closes it."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self._http = http
        self._auth = {"Authorization": f"Bearer {token}"}

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        response = await self._http.request(
            method, path, json=json, params=dict(params or {}), headers=self._auth
        )
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {}
            error = body.get("error", "") if isinstance(body, dict) else ""
            message = body.get("message", response.reason_phrase) if isinstance(body, dict) else ""
            raise RestError(
                response.status_code,
                str(error),
                str(message),
                retry_after=_retry_after(response.headers.get("Retry-After")),
            )
        return response.json() if response.content else None

    async def messages_after(
        self, chat_id: UUID, after_seq: int, *, limit: int = PAGE_LIMIT
    ) -> list[TimelineMessage]:
        """One page: messages with seq > ``after_seq``, in seq order."""
        data = await self._call(
            "GET", f"/api/chats/{chat_id}/messages", params={"afterSeq": after_seq, "limit": limit}
        )
        return [to_timeline(chat_id, _parse(MessageOut, item)) for item in data["items"]]

    async def messages_before(
        self, chat_id: UUID, before_seq: int, *, limit: int = 50
    ) -> list[TimelineMessage]:
        """The ``limit`` messages just below ``before_seq``, in seq order; ``before_seq`` =
        the chat's ``lastSeq + 1`` is the latest page (open a long chat there)."""
        data = await self._call(
            "GET",
            f"/api/chats/{chat_id}/messages",
            params={"beforeSeq": before_seq, "limit": limit},
        )
        return [to_timeline(chat_id, _parse(MessageOut, item)) for item in data["items"]]

    async def list_chats(self) -> list[ChatSummaryOut]:
        """Every chat the caller is an active member of, most recently active first."""
        found: list[ChatSummaryOut] = []
        params: dict[str, Any] = {"limit": PAGE_LIMIT}
        while True:
            page = _parse(ChatPage, await self._call("GET", "/api/chats", params=params))
            found.extend(page.items)
            if page.next_cursor is None:
                return found
            params["cursor"] = page.next_cursor

    async def sync(self, since: str | None = None, *, limit: int = SYNC_LIMIT) -> SyncPageOut:
        """One page of ``GET /api/sync``: the caller's events after ``since`` (a
        ``nextCursor``), or none and the current cursor without it."""
        params: dict[str, Any] = {"limit": limit}
        if since is not None:
            params["since"] = since
        return _parse(SyncPageOut, await self._call("GET", "/api/sync", params=params))

    async def history_after(self, chat_id: UUID, after_seq: int) -> list[TimelineMessage]:
        """Every message with seq > ``after_seq``, page by page."""
        found: list[TimelineMessage] = []
        while True:
            page = await self.messages_after(chat_id, after_seq)
            found.extend(page)
            if len(page) < PAGE_LIMIT:
                return found
            after_seq = page[-1].seq

    async def create_chat(self, title: str, member_user_ids: list[UUID]) -> UUID:
        data = await self._call(
            "POST",
            "/api/chats",
            json={"title": title, "memberUserIds": [str(u) for u in member_user_ids]},
        )
        return _parse(ChatCreated, data).chat_id

    async def get_chat(self, chat_id: UUID) -> ChatOut:
        return _parse(ChatOut, await self._call("GET", f"/api/chats/{chat_id}"))

    async def send_message(
        self,
        chat_id: UUID,
        body: str | None = None,
        *,
        kind: str = "Text",
        file_meta: Mapping[str, Any] | None = None,
        card_text: str | None = None,
        client_message_id: str | None = None,
        attempts: int = SEND_ATTEMPTS,
    ) -> MessageSent:
        """Send a Text (``body``), File (``file_meta``: fileId, name, size, contentType; ``body``
        a caption) or Card (``card_text``) message. Retried after a transport error or a 5xx
        with the same ``clientMessageId`` (made here unless given): the server answers a repeat
        with the first send, so the message exists once."""
        content: dict[str, Any] = {
            "kind": kind,
            "clientMessageId": client_message_id or uuid4().hex,
        }
        for name, value in (("body", body), ("fileMeta", file_meta), ("cardText", card_text)):
            if value is not None:
                content[name] = dict(value) if isinstance(value, Mapping) else value
        path = f"/api/chats/{chat_id}/messages"
        for attempt in range(1, attempts):
            try:
                return _parse(MessageSent, await self._call("POST", path, json=content))
            except (httpx.TransportError, RestError) as exc:
                if isinstance(exc, RestError) and exc.status < 500:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)
        return _parse(MessageSent, await self._call("POST", path, json=content))

    async def edit_message(
        self,
        chat_id: UUID,
        message_id: UUID,
        body: str | None = None,
        *,
        card_text: str | None = None,
    ) -> datetime:
        """A Text message takes a new ``body``, a Card message a new ``card_text``."""
        change = {"body": body} if card_text is None else {"cardText": card_text}
        data = await self._call("PATCH", f"/api/chats/{chat_id}/messages/{message_id}", json=change)
        return _parse(MessageEditedReply, data).edited_at

    async def delete_message(self, chat_id: UUID, message_id: UUID) -> None:
        await self._call("DELETE", f"/api/chats/{chat_id}/messages/{message_id}")

    async def mark_read(self, chat_id: UUID, seq: int) -> None:
        await self._call("POST", f"/api/chats/{chat_id}/read", json={"seq": seq})
