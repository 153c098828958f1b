"""``/api/chats``: chats, participants, messages, read receipts."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, NoReturn
from uuid import UUID

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError

from realtime_dispatch.contracts.messenger_rest import (
    ChatCreated,
    ChatOut,
    ChatPage,
    ChatSummaryOut,
    CreateChat,
    EditMessage,
    MessageEditedReply,
    MessageKind,
    MessagePage,
    MessageSent,
    ParticipantOut,
    ReadMark,
    RenameChat,
    SendMessage,
    UserRef,
)
from realtime_dispatch.messenger import chats, messages, reads
from realtime_dispatch.messenger.api.deps import Conn, User
from realtime_dispatch.messenger.api.send_rate import SendLimiter
from realtime_dispatch.messenger.api.strict_json import StrictJsonRoute, no_content
from realtime_dispatch.messenger.messages import MessageContent
from realtime_dispatch.messenger.refusals import RateLimited

router = APIRouter(prefix="/api/chats", tags=["chats"], route_class=StrictJsonRoute)

ChatId = Annotated[UUID, Path(alias="chatId")]
MessageId = Annotated[UUID, Path(alias="messageId")]
UserId = Annotated[UUID, Path(alias="userId")]


@router.post("", status_code=201, summary="Create a chat (the caller is a member)")
async def create_chat(body: CreateChat, user: User, conn: Conn) -> ChatCreated:
    chat_id = await chats.create_chat(
        conn, creator=user, title=body.title, members=body.member_user_ids
    )
    return ChatCreated(chat_id=chat_id)


def _invalid_query(name: str, message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("query", name), "msg": message, "type": "value_error"}])


def _encode_cursor(chat: chats.ChatSummary) -> str:
    return _cursor_text(chat.updated_at, chat.chat_id)


def _cursor_text(updated_at: datetime, chat_id: UUID) -> str:
    raw = f"{updated_at.isoformat()}|{chat_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, chat_id = raw.split("|")
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive time")
        key = UUID(chat_id)
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise _invalid_query("cursor", "not a cursor from a previous page") from exc
    # Only what this server writes: no other spelling of the same time or id (another digit
    # set, another uuid form) passes for a cursor.
    if _cursor_text(parsed, key) != cursor:
        raise _invalid_query("cursor", "not a cursor from a previous page")
    return parsed, key


@router.get("", summary="The caller's active chats, most recently active first")
async def list_chats(
    user: User,
    conn: Conn,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ChatPage:
    after = None if cursor is None else _decode_cursor(cursor)
    found = await chats.list_chats(conn, user=user, limit=limit + 1, after=after)
    page = found[:limit]
    return ChatPage(
        items=[ChatSummaryOut.model_validate(c, from_attributes=True) for c in page],
        next_cursor=_encode_cursor(page[-1]) if len(found) > limit else None,
    )


@router.get("/{chatId}", summary="A chat with its participants (members only)")
async def get_chat(chat_id: ChatId, user: User, conn: Conn) -> ChatOut:
    view = await chats.get_chat(conn, chat_id=chat_id, viewer=user)
    return ChatOut(
        chat_id=view.chat_id,
        title=view.title,
        participants=[
            ParticipantOut(user_id=p.user_id, active=p.active, read_seq=p.read_seq)
            for p in view.participants
        ],
        last_seq=view.last_seq,
    )


@no_content(router.patch, "/{chatId}", "Change the title (pushes chat_updated)")
async def rename_chat(chat_id: ChatId, body: RenameChat, user: User, conn: Conn) -> None:
    await chats.rename_chat(conn, chat_id=chat_id, actor=user, title=body.title)


@no_content(router.post, "/{chatId}/participants", "Add a member (joins chat:{chatId} live)")
async def add_participant(chat_id: ChatId, body: UserRef, user: User, conn: Conn) -> None:
    await chats.add_participant(conn, chat_id=chat_id, actor=user, user_id=body.user_id)


@no_content(
    router.delete,
    "/{chatId}/participants/{userId}",
    "Leave (own id) or remove a member (the creator); leaves the group live",
)
async def remove_participant(chat_id: ChatId, user_id: UserId, user: User, conn: Conn) -> None:
    await chats.remove_participant(conn, chat_id=chat_id, actor=user, user_id=user_id)


@router.post(
    "/{chatId}/messages",
    status_code=201,
    summary="Send a Text, File or Card message",
    responses={
        200: {
            "model": MessageSent,
            "description": "A repeat of `clientMessageId`: the"
            " first send's answer, nothing new written",
        }
    },
)
async def send_message(  # noqa: PLR0917 (FastAPI passes parameters by name)
    chat_id: ChatId, body: SendMessage, user: User, conn: Conn, request: Request, response: Response
) -> MessageSent:
    limiter: SendLimiter = request.app.state.send_limiter
    wait = limiter.take(user)
    counted = not wait
    if wait and not (
        # An idempotent retry of an accepted send is answered whatever the rate.
        body.client_message_id is not None
        and await messages.was_sent(conn, chat_id, user, body.client_message_id)
    ):
        _throttled(request, "send", wait)
    sent = await messages.send_message(
        conn,
        chat_id=chat_id,
        sender=user,
        content=MessageContent(
            MessageKind(body.kind),
            body.body,
            None if body.file_meta is None else body.file_meta.model_dump(by_alias=True),
            body.card_text,
        ),
        client_message_id=body.client_message_id,
        fingerprint_key=request.app.state.fingerprint_key,
    )
    if sent.repeated:
        response.status_code = 200
        if counted:
            limiter.give_back(user)
    return MessageSent(message_id=sent.message_id, seq=sent.seq, sent_at=sent.sent_at)


def _throttled(request: Request, action: str, wait: float) -> NoReturn:
    request.app.state.throttled.labels(action).inc()
    rate = request.app.state.send_limiter.rate
    raise RateLimited(
        f"too many messages: at most {rate.rate:g} a second (bursts of {rate.burst})",
        retry_after=wait,
    )


@router.get(
    "/{chatId}/messages",
    summary="Messages after a seq, or the page just below beforeSeq; always in seq order",
)
async def list_messages(  # noqa: PLR0917 (FastAPI passes parameters by name)
    chat_id: ChatId,
    user: User,
    conn: Conn,
    after_seq: Annotated[int | None, Query(alias="afterSeq", ge=0)] = None,
    before_seq: Annotated[int | None, Query(alias="beforeSeq", ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> MessagePage:
    if after_seq is not None and before_seq is not None:
        raise _invalid_query("beforeSeq", "give afterSeq or beforeSeq, not both")
    items = await messages.list_messages(
        conn,
        chat_id=chat_id,
        viewer=user,
        after_seq=after_seq or 0,
        before_seq=before_seq,
        limit=limit,
    )
    return MessagePage(items=items)


@router.patch(
    "/{chatId}/messages/{messageId}",
    summary="Edit a Text (body) or Card (cardText) message: the sender, within 60 s",
)
async def edit_message(  # noqa: PLR0917 (FastAPI passes parameters by name)
    chat_id: ChatId,
    message_id: MessageId,
    body: EditMessage,
    user: User,
    conn: Conn,
    request: Request,
) -> MessageEditedReply:
    limiter: SendLimiter = request.app.state.send_limiter
    if wait := limiter.take(user):
        _throttled(request, "edit", wait)
    edited_at = await messages.edit_message(
        conn,
        chat_id=chat_id,
        message_id=message_id,
        editor=user,
        body=body.body,
        card_text=body.card_text,
    )
    return MessageEditedReply(message_id=message_id, edited_at=edited_at)


@no_content(router.delete, "/{chatId}/messages/{messageId}", "Delete (the sender)")
async def delete_message(chat_id: ChatId, message_id: MessageId, user: User, conn: Conn) -> None:
    await messages.delete_message(conn, chat_id=chat_id, message_id=message_id, actor=user)


@no_content(router.post, "/{chatId}/read", "Mark messages up to seq as read")
async def mark_read(chat_id: ChatId, body: ReadMark, user: User, conn: Conn) -> None:
    await reads.mark_read(conn, chat_id=chat_id, user_id=user, seq=body.seq)
