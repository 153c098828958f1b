"""``/api/chats``: chats, participants, messages, read receipts."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response

from realtime_dispatch.messenger import chats, messages, reads
from realtime_dispatch.messenger.api.deps import Conn, User
from realtime_dispatch.messenger.api.schemas import (
    ChatCreated,
    ChatOut,
    CreateChat,
    MessageBody,
    MessageEdited,
    MessageOut,
    MessagePage,
    MessageSent,
    ParticipantOut,
    ReadMark,
    RenameChat,
    UserRef,
)

router = APIRouter(prefix="/api/chats", tags=["chats"])

ChatId = Annotated[UUID, Path(alias="chatId")]
MessageId = Annotated[UUID, Path(alias="messageId")]
UserId = Annotated[UUID, Path(alias="userId")]


@router.post("", status_code=201, summary="Create a chat (the caller is a member)")
async def create_chat(body: CreateChat, user: User, conn: Conn) -> ChatCreated:
    chat_id = await chats.create_chat(
        conn, creator=user, title=body.title, members=body.member_user_ids
    )
    return ChatCreated(chat_id=chat_id)


@router.get("/{chatId}", summary="A chat with its participants (members only)")
async def get_chat(chat_id: ChatId, user: User, conn: Conn) -> ChatOut:
    view = await chats.get_chat(conn, chat_id=chat_id, viewer=user)
    return ChatOut(
        chat_id=view.chat_id,
        title=view.title,
        participants=[
            ParticipantOut(user_id=p.user_id, active=p.active) for p in view.participants
        ],
        last_seq=view.last_seq,
    )


@router.patch(
    "/{chatId}",
    status_code=204,
    response_class=Response,
    summary="Change the title (pushes chat_updated)",
)
async def rename_chat(chat_id: ChatId, body: RenameChat, user: User, conn: Conn) -> None:
    await chats.rename_chat(conn, chat_id=chat_id, actor=user, title=body.title)


@router.post(
    "/{chatId}/participants",
    status_code=204,
    response_class=Response,
    summary="Add a member (joins chat:{chatId} live)",
)
async def add_participant(chat_id: ChatId, body: UserRef, user: User, conn: Conn) -> None:
    await chats.add_participant(conn, chat_id=chat_id, actor=user, user_id=body.user_id)


@router.delete(
    "/{chatId}/participants/{userId}",
    status_code=204,
    response_class=Response,
    summary="Leave (own id) or remove a member (the creator); leaves the group live",
)
async def remove_participant(chat_id: ChatId, user_id: UserId, user: User, conn: Conn) -> None:
    await chats.remove_participant(conn, chat_id=chat_id, actor=user, user_id=user_id)


@router.post("/{chatId}/messages", status_code=201, summary="Send a message")
async def send_message(chat_id: ChatId, body: MessageBody, user: User, conn: Conn) -> MessageSent:
    sent = await messages.send_message(conn, chat_id=chat_id, sender=user, body=body.body)
    return MessageSent(message_id=sent.message_id, seq=sent.seq, sent_at=sent.sent_at)


@router.get("/{chatId}/messages", summary="Messages after a seq, in seq order")
async def list_messages(
    chat_id: ChatId,
    user: User,
    conn: Conn,
    after_seq: Annotated[int, Query(alias="afterSeq", ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> MessagePage:
    items = await messages.list_messages(
        conn, chat_id=chat_id, viewer=user, after_seq=after_seq, limit=limit
    )
    return MessagePage(
        items=[
            MessageOut(
                message_id=m.message_id,
                seq=m.seq,
                sender_user_id=m.sender_user_id,
                body=m.body,
                sent_at=m.sent_at,
                edited_at=m.edited_at,
                deleted_at=m.deleted_at,
            )
            for m in items
        ]
    )


@router.patch(
    "/{chatId}/messages/{messageId}",
    summary="Edit (the sender, within 60 s of sending; else 403 / 409)",
)
async def edit_message(
    chat_id: ChatId, message_id: MessageId, body: MessageBody, user: User, conn: Conn
) -> MessageEdited:
    edited_at = await messages.edit_message(
        conn, chat_id=chat_id, message_id=message_id, editor=user, body=body.body
    )
    return MessageEdited(message_id=message_id, edited_at=edited_at)


@router.delete(
    "/{chatId}/messages/{messageId}",
    status_code=204,
    response_class=Response,
    summary="Delete (the sender)",
)
async def delete_message(chat_id: ChatId, message_id: MessageId, user: User, conn: Conn) -> None:
    await messages.delete_message(conn, chat_id=chat_id, message_id=message_id, actor=user)


@router.post(
    "/{chatId}/read",
    status_code=204,
    response_class=Response,
    summary="Mark messages up to seq as read",
)
async def mark_read(chat_id: ChatId, body: ReadMark, user: User, conn: Conn) -> None:
    await reads.mark_read(conn, chat_id=chat_id, user_id=user, seq=body.seq)
