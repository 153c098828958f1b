"""An owner service on asyncpg: post a chat message and its push intent in one transaction.

The message row and the ``messenger.realtime_outbox`` row commit together or not at all; the
dispatcher then pushes ``message_received`` to ``chat:{chatId}``. Run it against the database
``realtime-dispatch serve`` uses (with the embedded default, the URL is printed by
``realtime-dispatch serve`` as "starting embedded PostgreSQL in …"; any PostgreSQL URL works)::

    REALTIME_DATABASE_URL=postgresql://… python examples/owner_asyncpg.py CHAT_ID SENDER_ID "hello"
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from uuid import UUID, uuid4

import asyncpg

from realtime_dispatch import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind, enqueue


@dataclass(frozen=True)
class PostedMessage:
    message_id: UUID
    seq: int
    outbox_id: UUID


async def insert_message(
    conn: asyncpg.Connection, chat_id: UUID, sender_id: UUID, body: str
) -> PostedMessage:
    """The domain change and its push intent; the caller holds the transaction open."""
    seq = await conn.fetchval(
        "UPDATE messenger.chats SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq",
        chat_id,
    )
    if seq is None:
        raise LookupError(f"no chat {chat_id}")
    message_id = uuid4()
    await conn.execute(
        "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
        " VALUES ($1, $2, $3, $4, $5)",
        message_id,
        chat_id,
        seq,
        sender_id,
        body,
    )
    [outbox_id] = await enqueue(
        conn,
        OutboxIntent(
            kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id,
            message_id=message_id,
            seq=seq,
        ),
    )
    return PostedMessage(message_id, seq, outbox_id)


async def post_message(
    conn: asyncpg.Connection, chat_id: UUID, sender_id: UUID, body: str
) -> PostedMessage:
    async with conn.transaction():  # the push exists if and only if the message does
        return await insert_message(conn, chat_id, sender_id, body)


async def main(url: str, chat_id: UUID, sender_id: UUID, body: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        posted = await post_message(conn, chat_id, sender_id, body)
    finally:
        await conn.close()
    print(f"message {posted.message_id} seq {posted.seq}, push intent {posted.outbox_id}")


if __name__ == "__main__":
    chat, sender, text = sys.argv[1:4]
    asyncio.run(main(os.environ["REALTIME_DATABASE_URL"], UUID(chat), UUID(sender), text))
