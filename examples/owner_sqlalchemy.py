"""An owner service on SQLAlchemy 2 (Core or ORM session alike): post a chat message and its
push intent in one transaction. ``enqueue_statement(...).sqlalchemy_sql`` is the outbox INSERT
with ``:name`` parameters for ``text()``::

    REALTIME_DATABASE_URL=postgresql://… python examples/owner_sqlalchemy.py CHAT_ID SENDER_ID "hi"
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from uuid import UUID, uuid4

from sqlalchemy import Connection, create_engine, text

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


def engine_url(url: str) -> str:
    """``postgresql://…`` → ``postgresql+psycopg://…`` (SQLAlchemy on the psycopg 3 driver)."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def insert_message(conn: Connection, chat_id: UUID, sender_id: UUID, body: str) -> PostedMessage:
    """The domain change and its push intent; the caller holds the transaction open (with an
    ORM ``Session``, pass ``session.connection()``)."""
    seq = conn.execute(
        text(
            "UPDATE messenger.chats SET last_seq = last_seq + 1 WHERE id = :chat RETURNING last_seq"
        ),
        {"chat": chat_id},
    ).scalar_one_or_none()
    if seq is None:
        raise LookupError(f"no chat {chat_id}")
    message_id = uuid4()
    conn.execute(
        text(
            "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
            " VALUES (:id, :chat, :seq, :sender, :body)"
        ),
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
    conn.execute(text(statement.sqlalchemy_sql), statement.params)
    return PostedMessage(message_id, seq, UUID(str(statement.params["id"])))


def post_message(url: str, chat_id: UUID, sender_id: UUID, body: str) -> PostedMessage:
    engine = create_engine(engine_url(url))
    try:
        with engine.begin() as conn:  # one transaction: commit both rows, or neither
            return insert_message(conn, chat_id, sender_id, body)
    finally:
        engine.dispose()


if __name__ == "__main__":
    chat, sender, text_body = sys.argv[1:4]
    posted = post_message(os.environ["REALTIME_DATABASE_URL"], UUID(chat), UUID(sender), text_body)
    print(f"message {posted.message_id} seq {posted.seq}, push intent {posted.outbox_id}")
