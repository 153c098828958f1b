"""The app's own kinds (``-- kind:`` blocks of the manifest): one builder per declared kind.

A kind with a query runs it once per batch with the rows' ``ref_id`` values (``$1``); each
returned column becomes a payload field in camelCase, ``json``/``jsonb`` columns go out as the
JSON itself, ``numeric`` as a string, times as ISO 8601 UTC. The row is matched by the
returned ``ref_id``; a returned ``chat_id`` (or ``target_user_id``) that differs from the row's
is a ``TargetMismatch``; a ``ref_id`` the query does not return is ``<Kind>NotFound``, which the
seam turns into ``TargetGone`` when ``deleted_chats`` reports the chat deleted (see
:mod:`.builder`). An ids-only kind's payload is the row's own ids. Every payload carries
``chatId`` for a ``chat`` target (the seam adds ``eventId``).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import BuildResults
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.manifest.kinds import (
    ID_FIELDS,
    JSON_ONLY,
    DeclaredKind,
    camel,
    json_columns,
)
from realtime_dispatch.outbox.model import ClaimedRow, group_name
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec

_OPTIONS = orjson.OPT_UTC_Z
_KEY_COLUMNS = frozenset({"ref_id", "chat_id", "target_user_id"})


def _default(value: object) -> object:
    if isinstance(value, UUID):  # asyncpg's own UUID subclass
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(type(value).__name__)


class DeclaredKindBuilder:
    """Builds one declared kind's rows; ``keys`` writes the row's ids (REALTIME_KEY_TYPE)."""

    def __init__(self, kind: DeclaredKind, *, keys: KeyCodec = UUID_KEYS) -> None:
        self.kind = kind
        self.keys = keys
        self.query = f"kind {kind.name}"
        self._json_columns: frozenset[str] | None = None

    def ids_payload(self, row: ClaimedRow) -> Push:
        """The row's own ids as the payload (an ids-only kind; a chat's end delivered)."""
        to_json = self.keys.to_json
        out: dict[str, Any] = {}
        for column, field in ID_FIELDS:
            value = getattr(row, column)
            if value is not None:
                out[field] = value if column == "seq" else to_json(value)
        return Push(self._group(row), self.kind.event, payload_json=orjson.dumps(out))

    def _group(self, row: ClaimedRow) -> str:
        return group_name(self.kind.target_kind, row.chat_id, row.target_user_id)

    def _refuse(self, row: ClaimedRow) -> PayloadBuildError | None:
        """A row the kind cannot take (its writer's mistake; the trigger stops most)."""
        if row.target_kind != self.kind.target_kind.value:
            return PayloadBuildError(
                f"{self.kind.name} goes to a {self.kind.target_kind}", code="BadTarget"
            )
        if self.kind.target == "chat" and row.chat_id is None:
            return PayloadBuildError(f"{self.kind.name} needs chat_id", code="MissingChatId")
        if self.kind.target == "user" and row.target_user_id is None:
            return PayloadBuildError(
                f"{self.kind.name} needs target_user_id", code="MissingTargetUserId"
            )
        if not self.kind.ids_only and row.ref_id is None:
            return PayloadBuildError(f"{self.kind.name} needs ref_id", code="MissingRefId")
        if row.seq is not None and row.seq < 0:
            return PayloadBuildError("seq must be >= 0", code="InvalidSeq")
        if row.session_kind is not None:
            return PayloadBuildError(
                f"{self.kind.name} takes no session_kind", code="UnexpectedSessionKind"
            )
        return None

    async def build_rows(self, conn: DbConnection, rows: Sequence[ClaimedRow]) -> BuildResults:
        results: BuildResults = {}
        live: list[ClaimedRow] = []
        for row in rows:
            refused = self._refuse(row)
            if refused is not None:
                results[row.id] = refused
            else:
                live.append(row)
        if not live:
            return results
        if self.kind.ids_only:
            for row in live:
                results[row.id] = self.ids_payload(row)
            return results
        sql = self.kind.sql
        assert sql is not None
        if self._json_columns is None:
            # Known from the start's check; prepared here only where no check ran (a test).
            self._json_columns = json_columns(sql)
        if self._json_columns is None:
            stmt = await conn.prepare(sql)
            self._json_columns = frozenset(
                a.name for a in stmt.get_attributes() if a.type.name in JSON_ONLY
            )
        ref_ids = list({row.ref_id for row in live})
        records = {r["ref_id"]: r for r in await conn.fetch(sql, ref_ids)}
        for row in live:
            record = records.get(row.ref_id)
            if record is None:
                results[row.id] = PayloadBuildError(
                    f"the {self.kind.name} query returned no row for the row's ref_id",
                    code=f"{self.kind.name}NotFound",
                )
                continue
            results[row.id] = self._shape(row, record)
        return results

    def _shape(self, row: ClaimedRow, record: Any) -> Push | PayloadBuildError:
        to_json = self.keys.to_json
        out: dict[str, Any] = {}
        if self.kind.target == "chat":
            assert row.chat_id is not None
            out["chatId"] = to_json(row.chat_id)
        json_columns = self._json_columns or frozenset()
        for column, value in record.items():
            if column == "chat_id" and value != row.chat_id:
                return PayloadBuildError("row targets another chat", code="TargetMismatch")
            if column == "target_user_id" and value != row.target_user_id:
                return PayloadBuildError("row targets another user", code="TargetMismatch")
            field: object = value
            if value is not None and column in json_columns:
                field = orjson.Fragment(value)
            elif value is not None and column in _KEY_COLUMNS:
                field = to_json(value)
            out[camel(column)] = field
        try:
            payload = orjson.dumps(out, default=_default, option=_OPTIONS)
        except TypeError as exc:
            return PayloadBuildError(
                f"{self.kind.name}: a column has no JSON form ({exc})", code="InvalidPayload"
            )
        return Push(self._group(row), self.kind.event, payload_json=payload)
