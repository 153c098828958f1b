"""Message rows → payloads: one query for every message row of a batch; the chat id is
part of the key, so a row is never built from another chat's message.

The payload's ``seq`` is the message's (the manifest's ``messages`` query). An outbox row whose
own ``seq`` differs from it is a writer's slip, not a reason to withhold the push: it is
delivered with the message's, and logged once per row (``outbox_seq_mismatch``, a warning with
the row id and both numbers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from uuid import UUID

import asyncpg
import orjson
import structlog

from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent, disabled
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, Shaped
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

_KINDS = frozenset(
    {
        RealtimeDispatchKind.MESSAGE_RECEIVED,
        RealtimeDispatchKind.MESSAGE_EDITED,
        RealtimeDispatchKind.MESSAGE_DELETED,
    }
)


_log = structlog.get_logger(__name__)

WARNED_ROWS = 10_000
"""Row ids a builder remembers having warned about, so that a retried row warns once."""

# Per-kind constants, worked out once rather than per row.
_EVENT_NAMES = {kind: kind.event_name for kind in _KINDS}


class MessagePayloadBuilder:
    """``message_id`` = the message; ``sql`` is the manifest's ``messages`` query (``None``:
    the message kinds are disabled)."""

    kinds = _KINDS
    query = "messages"

    def __init__(
        self, *, sql: str | None, encoder: PayloadEncoder = FAST, keys: KeyCodec = UUID_KEYS
    ) -> None:
        self.sql = sql
        self.encoder = encoder
        self._warned: dict[UUID, None] = {}
        self.to_json = keys.to_json

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        if self.sql is None:
            return disabled(items, self.query)
        ids = list({item.intent.message_id for item in items if item.intent.message_id})
        records = {r["id"]: r for r in await conn.fetch(self.sql, ids)}
        results: BuildResults = {}
        encode, to_json = self.encoder.encode, self.to_json
        for item in items:
            intent = item.intent
            record = records.get(intent.message_id) if intent.message_id else None
            if record is None:
                results[item.row.id] = PayloadBuildError(
                    "referenced message does not exist", code="MessageNotFound"
                )
                continue
            if record["chat_id"] != intent.chat_id:
                # A writer's bug, never TargetGone: the message lives, in another chat (were
                # the row's chat a deleted one, a not-found would end it Done without an alert).
                results[item.row.id] = PayloadBuildError(
                    "row targets another chat", code="TargetMismatch"
                )
                continue
            if intent.seq is not None and intent.seq != record["seq"]:
                self._seq_mismatch(item, record["seq"])
            try:
                payload = encode(*shape_message(intent.kind, record, to_json))
            except PayloadBuildError as exc:
                results[item.row.id] = exc
                continue
            results[item.row.id] = Push(
                intent.group, _EVENT_NAMES[intent.kind], payload_json=payload
            )
        return results

    def _seq_mismatch(self, item: RowIntent, message_seq: object) -> None:
        row_id = item.row.id
        if row_id in self._warned:
            return
        self._warned[row_id] = None
        if len(self._warned) > WARNED_ROWS:
            del self._warned[next(iter(self._warned))]
        _log.warning(
            "outbox_seq_mismatch",
            outbox_entry_id=str(row_id),
            kind=item.intent.kind.value,
            outbox_seq=item.intent.seq,
            message_seq=message_seq,
        )


def shape_message(
    kind: RealtimeDispatchKind, r: asyncpg.Record, to_json: Callable[[Key], str | int] = str
) -> Shaped:
    """The payload's contract and fields; a deleted message keeps no content. Ids are given
    as the wire carries them (``to_json``: their strings for uuid keys, as orjson writes the
    driver's UUID type only through a Python hook; the number itself for bigint keys)."""
    chat_id, message_id, seq, deleted_at = (
        to_json(r["chat_id"]),
        to_json(r["id"]),
        r["seq"],
        r["deleted_at"],
    )
    if kind is RealtimeDispatchKind.MESSAGE_RECEIVED:
        if deleted_at is not None:
            body = file_meta = card_text = None
        else:
            body, file_meta, card_text = r["body"], r["file_meta"], r["card_text"]
            if file_meta is not None:
                file_meta = orjson.loads(file_meta)
        sender = r["sender_user_id"]
        return MessageReceived, {
            "chat_id": chat_id,
            "message_id": message_id,
            "seq": seq,
            "sender_user_id": None if sender is None else to_json(sender),
            "kind": r["kind"],
            "sent_at": r["sent_at"],
            "body": body,
            "file_meta": file_meta,
            "card_text": card_text,
        }
    if kind is RealtimeDispatchKind.MESSAGE_EDITED:
        if r["edited_at"] is None:
            raise PayloadBuildError("message was never edited", code="NotEdited")
        deleted = deleted_at is not None
        return MessageEdited, {
            "chat_id": chat_id,
            "message_id": message_id,
            "seq": seq,
            "edited_at": r["edited_at"],
            "body": None if deleted else r["body"],
            "card_text": None if deleted else r["card_text"],
        }
    if deleted_at is None:
        raise PayloadBuildError("message is not deleted", code="NotDeleted")
    return MessageDeleted, {
        "chat_id": chat_id,
        "message_id": message_id,
        "seq": seq,
        "deleted_at": deleted_at,
    }
