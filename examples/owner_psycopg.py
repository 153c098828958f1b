"""An owner service on psycopg 3 (synchronous, as in a Django or Flask app): post a chat message
and its push intent in one transaction. ``enqueue_statement`` gives the outbox INSERT with
``%(name)s`` parameters, psycopg's own style::

    REALTIME_DATABASE_URL=postgresql://… python examples/owner_psycopg.py CHAT_ID SENDER_ID "hello"
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import psycopg

from realtime_dispatch import (
    OutboxIntent,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    enqueue_statement,
)


@dataclass(frozen=True)
class PostedMessage:
    message_id: UUID
    seq: int
    outbox_id: UUID


def insert_message(
    conn: psycopg.Connection[Any], chat_id: UUID, sender_id: UUID, body: str
) -> PostedMessage:
    """The domain change and its push intent; the caller holds the transaction open."""
    row = conn.execute(
        "UPDATE messenger.chats SET last_seq = last_seq + 1 WHERE id = %(chat)s RETURNING last_seq",
        {"chat": chat_id},
    ).fetchone()
    if row is None:
        raise LookupError(f"no chat {chat_id}")
    seq = int(row[0])
    message_id = uuid4()
    conn.execute(
        "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
        " VALUES (%(id)s, %(chat)s, %(seq)s, %(sender)s, %(body)s)",
        {"id": message_id, "chat": chat_id, "seq": seq, "sender": sender_id, "body": body},
    )
    statement = enqueue_statement(
        OutboxIntent(
            kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id,
            message_id=message_id,
            seq=seq,
        )
    )
    conn.execute(statement.sql, statement.params)
    return PostedMessage(message_id, seq, UUID(str(statement.params["id"])))


def post_message(
    conn: psycopg.Connection[Any], chat_id: UUID, sender_id: UUID, body: str
) -> PostedMessage:
    with conn.transaction():  # the push exists if and only if the message does
        return insert_message(conn, chat_id, sender_id, body)


def main(url: str, chat_id: UUID, sender_id: UUID, body: str) -> None:
    with psycopg.connect(url) as conn:
        posted = post_message(conn, chat_id, sender_id, body)
    print(f"message {posted.message_id} seq {posted.seq}, push intent {posted.outbox_id}")


if __name__ == "__main__":
    chat, sender, text = sys.argv[1:4]
    main(os.environ["REALTIME_DATABASE_URL"], UUID(chat), UUID(sender), text)
