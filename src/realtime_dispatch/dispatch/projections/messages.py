"""Message rows → payloads: one query for every message row of a batch; the chat id is
part of the key, so a row is never built from another chat's message."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import orjson

from realtime_dispatch.contracts.base import wire
from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.database import DbConnection
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.push import JsonObject, Push

# Projection of the messages a batch references; the chat id is part of the key so a row can
# never be built from another chat's message.
MESSAGES_SQL = """
SELECT id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text,
       sent_at, edited_at, deleted_at
FROM messenger.messages
WHERE id = ANY($1::uuid[])
"""


_KINDS = frozenset(
    {
        RealtimeDispatchKind.MESSAGE_RECEIVED,
        RealtimeDispatchKind.MESSAGE_EDITED,
        RealtimeDispatchKind.MESSAGE_DELETED,
    }
)


# Per-kind constants, worked out once rather than per row.
_EVENT_NAMES = {kind: kind.event_name for kind in _KINDS}


class MessagePayloadBuilder:
    kinds = _KINDS

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        ids = list({item.intent.message_id for item in items if item.intent.message_id})
        records = {r["id"]: r for r in await conn.fetch(MESSAGES_SQL, ids)}
        results: BuildResults = {}
        for item in items:
            intent = item.intent
            record = records.get(intent.message_id) if intent.message_id else None
            if record is None or record["chat_id"] != intent.chat_id:
                results[item.row.id] = PayloadBuildError(
                    "referenced message does not exist", code="MessageNotFound"
                )
                continue
            try:
                payload = _shape(intent.kind, record)
            except PayloadBuildError as exc:
                results[item.row.id] = exc
                continue
            results[item.row.id] = Push(intent.group, _EVENT_NAMES[intent.kind], payload)
        return results


def _shape(kind: RealtimeDispatchKind, r: asyncpg.Record) -> JsonObject:
    """The wire payload: the contract validated from the row's fields and dumped at once (the
    same as ``Contract(**fields).wire()``, without the per-row Python model round trip)."""
    common = {"chat_id": r["chat_id"], "message_id": r["id"], "seq": r["seq"]}
    if kind is RealtimeDispatchKind.MESSAGE_RECEIVED:
        deleted = r["deleted_at"] is not None
        file_meta = r["file_meta"]
        return wire(
            MessageReceived,
            {
                **common,
                "sender_user_id": r["sender_user_id"],
                "kind": r["kind"],
                "sent_at": r["sent_at"],
                "body": None if deleted else r["body"],
                "file_meta": None if deleted or file_meta is None else orjson.loads(file_meta),
                "card_text": None if deleted else r["card_text"],
            },
        )
    if kind is RealtimeDispatchKind.MESSAGE_EDITED:
        if r["edited_at"] is None:
            raise PayloadBuildError("message was never edited", code="NotEdited")
        deleted = r["deleted_at"] is not None
        return wire(
            MessageEdited,
            {
                **common,
                "edited_at": r["edited_at"],
                "body": None if deleted else r["body"],
                "card_text": None if deleted else r["card_text"],
            },
        )
    if r["deleted_at"] is None:
        raise PayloadBuildError("message is not deleted", code="NotDeleted")
    return wire(MessageDeleted, {**common, "deleted_at": r["deleted_at"]})
