"""Messages: send (gap-free per-chat seq; Text, File or Card; idempotent under a
``clientMessageId``), edit (sender, within 60 s, Text and Card), delete, list both ways.

The seq comes from ``chats.last_seq``, incremented under the chat row's lock by the sending
statement (one statement takes the seq and writes the message and its push intent): concurrent
senders queue on that lock, so seqs are 1..N with no gap or duplicate (a rolled-back send rolls
its increment back too).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from realtime_dispatch.contracts.messenger_rest import MessageKind, MessageOut, content_problems
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.manifest.blacklist import BLOCKED_IN_CHAT
from realtime_dispatch.messenger.access import (
    is_blocked_in_chat,
    refuse_if_blocked_in_chat,
    require_active_member,
)
from realtime_dispatch.messenger.refusals import Conflict, Forbidden, InvalidInput, NotFound
from realtime_dispatch.outbox.enqueue import enqueue, enqueue_select_sql
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, RealtimeTargetKind
from realtime_dispatch.values.ids import new_id

EDIT_WINDOW_SECONDS = 60
PROCESS_FINGERPRINT_KEY = secrets.token_bytes(32)
"""The fingerprint key of callers that give none (library use; ``serve`` always gives one):
fingerprints made with it are told apart only within this process's lifetime."""
DELETED_FINGERPRINT = b""
"""What a deleted message's fingerprint is blanked to: nothing of its content remains."""


@dataclass(frozen=True, slots=True)
class MessageContent:
    """What a sender sends: Text has a body; File has ``file_meta`` and may have a body (a
    caption); Card has ``card_text`` only."""

    kind: MessageKind = MessageKind.TEXT
    body: str | None = None
    file_meta: dict[str, Any] | None = None
    card_text: str | None = None

    def check(self) -> None:
        """InvalidInput naming the field when the content does not fit its kind."""
        values = {"body": self.body, "fileMeta": self.file_meta, "cardText": self.card_text}
        given = {name for name, value in values.items() if value is not None}
        for field, problem in content_problems(self.kind, given):
            if problem == "missing":
                raise InvalidInput(f"{field} is required for a {self.kind} message")
            raise InvalidInput(f"{field} is not allowed in a {self.kind} message")

    def fingerprint(self, key: bytes) -> bytes:
        """Tells a retry of this send (same content) from a reused ``clientMessageId``: an
        HMAC-SHA256 under a server secret, so that the stored value cannot be checked against
        guesses of the content by whoever reads the database."""
        canonical = [self.kind.value, self.body, self.file_meta, self.card_text]
        data = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
        return hmac.new(key, data, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class SentMessage:
    message_id: UUID
    chat_id: UUID
    seq: int
    sent_at: datetime
    outbox_id: UUID | None
    """None for a repeat: nothing was written."""
    repeated: bool = False
    """The ``clientMessageId`` was sent before: this is the first send's answer."""


# The sender's membership, and whether the sender is blocked in the chat (manifest.blacklist: a
# blocker is an active member of a chat that has been, or is, a chat of just the two of them).
_SENDER_SQL = f"""
SELECT p.active, {BLOCKED_IN_CHAT} AS blocked
FROM messenger.participants p
WHERE p.chat_id = $1 AND p.user_id = $2
"""


# The whole send is one statement, so one round trip (BEGIN, the sender check, the seq, the
# message, the outbox row and COMMIT were six): per-round-trip overhead was most of the owner's
# and the server's CPU per send, and the chat row lock is now held for one statement instead of
# across four round trips. All CTEs share one snapshot and data-modifying CTEs run even when
# nothing reads them, so each write is gated by the rows of the one before: no bump unless the
# sender may send, no message without a bump, no outbox row without a message. The final SELECT
# returns the sender's facts even for a refused send (no row at all: not a participant).
# The outbox's NOTIFY trigger is per statement, so it fires on a refused send too (zero rows):
# at worst an idle dispatcher wakes, claims nothing and sleeps again.
# The outbox id is made by the server once the chat row lock is granted (migration 0007): the
# dispatcher claims in id order, and an id made before waiting for the lock could sort before the
# id of a send with a smaller seq. The message id needs no such order (messages go by seq).
# With a clientMessageId the statement first claims (chat, sender, clientMessageId) in
# messenger.message_client_ids (migration 0008): a concurrent repeat waits on that key until the
# first send commits, then inserts nothing, and without a claim there is no bump, no message and
# no outbox row. The claim comes before the chat row lock, so the two waits cannot cross.
# $1 chat, $2 sender, $3 body, $4 message id, $5 kind, $6 target kind, $7 message kind,
# $8 file meta (json), $9 card text, $10 client message id, $11 fingerprint.
_SEND_OUTBOX_SQL = enqueue_select_sql(
    {
        "id": "messenger.realtime_new_id()",
        "kind": "$5::text",
        "target_kind": "$6::text",
        "chat_id": "$1",
        "message_id": "$4",
        "seq": "seq",
    },
    "msg",
)
# Presence consent (manifest query ``presence_chats``): a sender who had not taken part in the
# chat (not its creator, no read mark, no message before this one) takes part now, so the hubs
# are hinted to read the sender's chats again (a membership hint: no ``active``), in the same
# statement, so at most once per member and chat rather than once per message.
_TOOK_PART_SQL = f"""
    SELECT pg_notify('{MEMBERSHIP_CHANNEL}',
                     json_build_object('chatId', $1::uuid, 'userId', $2::uuid)::text) IS NULL
    FROM msg, messenger.participants p JOIN messenger.chats c ON c.id = p.chat_id
    WHERE p.chat_id = $1 AND p.user_id = $2 AND p.last_read_seq = 0
      AND c.created_by IS DISTINCT FROM $2
      AND NOT EXISTS (SELECT 1 FROM messenger.messages m
                      WHERE m.chat_id = $1 AND m.sender_user_id = $2)
"""
_SEND_SQL = f"""
WITH sender AS ({_SENDER_SQL}),
allowed AS (SELECT 1 FROM sender WHERE active AND NOT blocked),
claim AS (
    INSERT INTO messenger.message_client_ids
        (chat_id, sender_user_id, client_message_id, message_id, fingerprint)
    SELECT $1, $2, $10::varchar, $4::uuid, $11::bytea
    WHERE $10::varchar IS NOT NULL AND EXISTS (SELECT 1 FROM allowed)
    ON CONFLICT DO NOTHING
    RETURNING 1
),
bump AS (
    UPDATE messenger.chats SET last_seq = last_seq + 1, updated_at = now()
    WHERE id = $1
      AND EXISTS (SELECT 1 FROM allowed)
      AND ($10::varchar IS NULL OR EXISTS (SELECT 1 FROM claim))
    RETURNING last_seq
),
msg AS (
    INSERT INTO messenger.messages
        (id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text)
    SELECT $4::uuid, $1, last_seq, $2, $7::varchar, $3::text, $8::jsonb, $9::text FROM bump
    RETURNING seq, sent_at
),
outbox AS ({_SEND_OUTBOX_SQL} RETURNING id),
took_part AS ({_TOOK_PART_SQL})
SELECT s.active, s.blocked, m.seq, m.sent_at, o.id AS outbox_id,
       EXISTS (SELECT 1 FROM claim) AS claimed
FROM sender s LEFT JOIN msg m ON true LEFT JOIN outbox o ON true LEFT JOIN took_part ON true
"""
_FIRST_SEND_SQL = """
SELECT d.fingerprint, m.id, m.seq, m.sent_at
FROM messenger.message_client_ids d JOIN messenger.messages m ON m.id = d.message_id
WHERE d.chat_id = $1 AND d.sender_user_id = $2 AND d.client_message_id = $3
"""


async def send_message(
    conn: DbConnection,
    *,
    chat_id: UUID,
    sender: UUID,
    body: str | None = None,
    content: MessageContent | None = None,
    client_message_id: str | None = None,
    fingerprint_key: bytes | None = None,
) -> SentMessage:
    """Allocate the next per-chat seq under the chat row lock, insert, enqueue the push: one
    statement, atomic on its own or part of the caller's open transaction. ``body`` alone is a
    Text message. A repeat of ``client_message_id`` by the same sender in the same chat writes
    nothing and returns the first send (``repeated``); with other content it is a Conflict
    (told by the content's fingerprint under ``fingerprint_key``, by default
    :data:`PROCESS_FINGERPRINT_KEY`). A repeat of a deleted message is a repeat, whatever it
    carries: its fingerprint was blanked with it."""
    content = content if content is not None else MessageContent(body=body)
    content.check()
    if client_message_id is not None and not 1 <= len(client_message_id) <= 64:
        raise InvalidInput("clientMessageId must be 1-64 characters")
    message_id = new_id()
    fingerprint = content.fingerprint(fingerprint_key or PROCESS_FINGERPRINT_KEY)
    row = await conn.fetchrow(
        _SEND_SQL,
        chat_id,
        sender,
        content.body,
        message_id,
        RealtimeDispatchKind.MESSAGE_RECEIVED.value,
        RealtimeTargetKind.CHAT_GROUP.value,
        content.kind.value,
        None if content.file_meta is None else orjson.dumps(content.file_meta).decode(),
        content.card_text,
        client_message_id,
        fingerprint,
    )
    if row is None or not row["active"]:
        await require_active_member(conn, chat_id, sender)  # raises NotFound / Forbidden
        raise Forbidden("not an active member")
    if row["blocked"]:
        raise Forbidden("the user has blocked you")
    if client_message_id is not None and not row["claimed"]:
        return await _first_send(conn, chat_id, sender, client_message_id, fingerprint)
    if row["seq"] is None:  # only if the chat row was deleted under this send
        raise NotFound("chat not found")
    return SentMessage(message_id, chat_id, int(row["seq"]), row["sent_at"], row["outbox_id"])


async def was_sent(conn: DbConnection, chat_id: UUID, sender: UUID, client_message_id: str) -> bool:
    """Whether ``sender`` has sent ``client_message_id`` in the chat (a send with it now is a
    repeat, or a Conflict: it writes nothing)."""
    return await conn.fetchrow(_FIRST_SEND_SQL, chat_id, sender, client_message_id) is not None


async def _first_send(
    conn: DbConnection, chat_id: UUID, sender: UUID, client_message_id: str, fingerprint: bytes
) -> SentMessage:
    first = await conn.fetchrow(_FIRST_SEND_SQL, chat_id, sender, client_message_id)
    if first is None:  # the first send's chat was deleted meanwhile
        raise NotFound("chat not found")
    stored = bytes(first["fingerprint"])
    if stored != DELETED_FINGERPRINT and not hmac.compare_digest(stored, fingerprint):
        raise Conflict("clientMessageId was already used for another message")
    return SentMessage(
        first["id"], chat_id, int(first["seq"]), first["sent_at"], None, repeated=True
    )


async def _message_for_change(
    conn: DbConnection, chat_id: UUID, message_id: UUID
) -> asyncpg.Record:
    row = await conn.fetchrow(
        "SELECT seq, sender_user_id, kind, sent_at, deleted_at FROM messenger.messages"
        " WHERE id = $1 AND chat_id = $2 FOR UPDATE",
        message_id,
        chat_id,
    )
    if row is None:
        raise NotFound("message not found")
    return row


async def edit_message(
    conn: DbConnection,
    *,
    chat_id: UUID,
    message_id: UUID,
    editor: UUID,
    body: str | None = None,
    card_text: str | None = None,
) -> datetime:
    """Only the sender, only within :data:`EDIT_WINDOW_SECONDS` of sending. A Text message
    takes a new ``body``, a Card message a new ``card_text``; a File message cannot be edited."""
    if (body is None) == (card_text is None):
        raise InvalidInput("give exactly one of body and cardText")
    async with conn.transaction():
        await require_active_member(conn, chat_id, editor)
        await refuse_if_blocked_in_chat(conn, chat_id=chat_id, actor=editor)
        row = await _message_for_change(conn, chat_id, message_id)
        if row["sender_user_id"] != editor:
            raise Forbidden("only the sender may edit a message")
        if row["deleted_at"] is not None:
            raise Conflict("message was deleted")
        kind = row["kind"]
        if kind not in (MessageKind.TEXT, MessageKind.CARD):
            raise Conflict(f"a {kind} message cannot be edited")
        if (kind == MessageKind.CARD) != (card_text is not None):
            field = "cardText" if kind == MessageKind.CARD else "body"
            raise InvalidInput(f"a {kind} message is edited with {field}")
        edited_at = await conn.fetchval(
            "UPDATE messenger.messages SET body = coalesce($2, body),"
            " card_text = coalesce($4, card_text), edited_at = now()"
            " WHERE id = $1 AND now() - sent_at <= make_interval(secs => $3)"
            " RETURNING edited_at",
            message_id,
            body,
            float(EDIT_WINDOW_SECONDS),
            card_text,
        )
        if edited_at is None:
            raise Conflict(f"the edit window of {EDIT_WINDOW_SECONDS} s has passed")
        await _changed(conn, RealtimeDispatchKind.MESSAGE_EDITED, chat_id, message_id, row)
    return edited_at  # type: ignore[no-any-return]


async def _changed(
    conn: DbConnection,
    kind: RealtimeDispatchKind,
    chat_id: UUID,
    message_id: UUID,
    row: asyncpg.Record,
) -> None:
    """The push of an edit or a delete to the chat, with the message's ``seq``."""
    await enqueue(
        conn, OutboxIntent.to_chat(kind, chat_id, message_id=message_id, seq=int(row["seq"]))
    )


async def delete_message(
    conn: DbConnection, *, chat_id: UUID, message_id: UUID, actor: UUID
) -> None:
    """Only the sender; the content is cleared, and so is its idempotency fingerprint. Deleting
    twice is a no-op (no second push); a sender blocked in the chat is not pushed."""
    async with conn.transaction():
        await require_active_member(conn, chat_id, actor)
        row = await _message_for_change(conn, chat_id, message_id)
        if row["sender_user_id"] != actor:
            raise Forbidden("only the sender may delete a message")
        if row["deleted_at"] is not None:
            return
        await conn.execute(
            "UPDATE messenger.messages SET deleted_at = now(), body = NULL, file_meta = NULL,"
            " card_text = NULL WHERE id = $1",
            message_id,
        )
        await conn.execute(
            "UPDATE messenger.message_client_ids SET fingerprint = $4"
            " WHERE chat_id = $1 AND sender_user_id = $2 AND message_id = $3",
            chat_id,
            actor,
            message_id,
            DELETED_FINGERPRINT,
        )
        if await is_blocked_in_chat(conn, chat_id=chat_id, actor=actor):
            return  # deleted, but not pushed to the blocker (REST history shows it deleted)
        await _changed(conn, RealtimeDispatchKind.MESSAGE_DELETED, chat_id, message_id, row)


_LIST_COLUMNS = (
    "id, seq, sender_user_id, kind, body, file_meta, card_text, sent_at, edited_at, deleted_at"
)
_AFTER_SQL = f"""
SELECT {_LIST_COLUMNS} FROM messenger.messages
WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
"""
# The page just below beforeSeq, walked backwards on uq_messages_chat_seq, returned ascending.
_BEFORE_SQL = f"""
SELECT * FROM (
    SELECT {_LIST_COLUMNS} FROM messenger.messages
    WHERE chat_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3
) AS page ORDER BY seq
"""


async def list_messages(
    conn: DbConnection,
    *,
    chat_id: UUID,
    viewer: UUID,
    after_seq: int = 0,
    limit: int = 50,
    before_seq: int | None = None,
) -> list[MessageOut]:
    """Messages with ``seq > after_seq`` in seq order, or (``before_seq``) the ``limit``
    messages just below it, also in seq order. Deleted ones come without content."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await require_active_member(conn, chat_id, viewer)
        if before_seq is None:
            rows = await conn.fetch(_AFTER_SQL, chat_id, after_seq, limit)
        else:
            rows = await conn.fetch(_BEFORE_SQL, chat_id, before_seq, limit)
    return [
        MessageOut(
            message_id=r["id"],
            seq=int(r["seq"]),
            sender_user_id=r["sender_user_id"],
            body=r["body"],
            sent_at=r["sent_at"],
            edited_at=r["edited_at"],
            deleted_at=r["deleted_at"],
            kind=r["kind"],
            file_meta=None if r["file_meta"] is None else orjson.loads(r["file_meta"]),
            card_text=r["card_text"],
        )
        for r in rows
    ]
