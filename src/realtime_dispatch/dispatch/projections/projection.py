"""The shape shared by the non-message builders: rows reference one entity by ``ref_id``; the
builder loads every referenced entity of the batch with one query, checks that each row's
target is allowed to see it, and shapes the payload from the entity's current state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import asyncpg
from pydantic import ValidationError

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent, disabled
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, Shaped
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, SessionKind


class RefProjectionBuilder:
    """Subclasses set ``kinds``, ``query`` (the manifest query it reads: one ``$1 uuid[]``
    parameter, an ``id`` column), ``entity`` (for the not-found reason) and implement
    :meth:`shape`. ``sql`` is that query's text from the manifest (``None``: the manifest has
    none, and the kinds are disabled); ``encoder`` writes the shaped payload's JSON
    (:data:`~.encoding.FAST` unless a test swaps it)."""

    kinds: frozenset[RealtimeDispatchKind]
    query: ClassVar[str]
    entity: ClassVar[str]

    def __init__(self, *, sql: str | None, encoder: PayloadEncoder = FAST) -> None:
        self.sql = sql
        self.encoder = encoder

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        if self.sql is None:
            return disabled(items, self.query)
        ids = list({item.intent.ref_id for item in items if item.intent.ref_id is not None})
        records = {r["id"]: r for r in await conn.fetch(self.sql, ids)} if ids else {}
        results: BuildResults = {}
        encode = self.encoder.encode
        for item in items:
            intent = item.intent
            record = records.get(intent.ref_id) if intent.ref_id is not None else None
            if record is None:
                results[item.row.id] = PayloadBuildError(
                    f"referenced {self.entity} does not exist", code=f"{self.entity}NotFound"
                )
                continue
            try:
                payload = encode(*self.shape(intent, record))
            except PayloadBuildError as exc:
                results[item.row.id] = exc
                continue
            except ValidationError as exc:
                results[item.row.id] = PayloadBuildError(
                    f"payload failed validation ({exc.error_count()} errors)",
                    code="InvalidPayload",
                )
                continue
            results[item.row.id] = Push(intent.group, intent.kind.event_name, payload_json=payload)
        return results

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        """The payload's contract and its fields, from the entity's current state."""
        raise NotImplementedError


def require(condition: bool, message: str, code: str) -> None:
    """A row that cannot be built from the current state: a permanent failure."""
    if not condition:
        raise PayloadBuildError(message, code=code)


def require_chat(intent: OutboxIntent, record: asyncpg.Record) -> None:
    """The row's ``chat:`` group must be the entity's own chat (no cross-chat leaks)."""
    require(record["chat_id"] == intent.chat_id, "row targets another chat", "TargetMismatch")


def require_user(intent: OutboxIntent, *allowed: object) -> None:
    """The row's ``user:`` group must be one of the users allowed to see the entity."""
    require(intent.target_user_id in allowed, "row targets another user", "TargetMismatch")


def require_session(
    intent: OutboxIntent, record: asyncpg.Record, *, expected: SessionKind | None = None
) -> None:
    """Media rows: the session kind matches the entity's; Direct rows go to a party of the
    call (``caller_user_id`` / ``callee_user_id``), Conference rows to the conference's chat."""
    kind = intent.session_kind
    if expected is not None:
        require(kind is expected, f"{intent.kind} needs session_kind {expected}", "BadSessionKind")
    stored = record.get("session_kind")
    if stored is not None:
        require(stored == (kind.value if kind else None), "session kind mismatch", "BadSessionKind")
    if kind is SessionKind.DIRECT:
        require_user(intent, record["caller_user_id"], record["callee_user_id"])
    else:
        require_chat(intent, record)


def session_fields(record: asyncpg.Record) -> dict[str, object]:
    """Where a recording or a screen share happens, as its payloads say it: the session's kind,
    its call or conference, and the conference's chat."""
    return {
        "session_kind": record["session_kind"],
        "call_id": record["call_id"],
        "conference_id": record["conference_id"],
        "chat_id": record["chat_id"],
    }


@dataclass(frozen=True, slots=True)
class SessionStep:
    """One event of a record in a media session: its payload, and the time column the payload
    reports (with any ``extra`` columns); where ``missing`` is set, a row whose column is still
    null is refused with it (``code``): the record has not taken that step."""

    payload: type[Contract]
    at: str
    missing: str | None = None
    code: str = ""
    extra: tuple[str, ...] = ()


class SessionRecordBuilder(RefProjectionBuilder):
    """A record in a call or a conference (a recording, a screen share): the session kind picks
    the audience (:func:`require_session`), and each kind's payload is the record's id (as
    ``record_id``), :func:`session_fields`, its ``user_field`` and its step's columns.
    Subclasses set ``steps``, one per kind."""

    record_id: ClassVar[str]
    user_field: ClassVar[str]
    steps: ClassVar[Mapping[RealtimeDispatchKind, SessionStep]]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.kinds = frozenset(cls.steps)

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        require_session(intent, record)
        step = self.steps[intent.kind]
        if step.missing is not None:
            require(record[step.at] is not None, step.missing, step.code)
        return step.payload, {
            self.record_id: record["id"],
            **session_fields(record),
            self.user_field: record[self.user_field],
            step.at: record[step.at],
            **{column: record[column] for column in step.extra},
        }


def media_withheld(record: asyncpg.Record) -> bool:
    """The optional ``media_withheld`` column of a conference's or a 1:1 call's projection:
    true where the blacklist holds in its chat (a member blocked there by another) or between
    the call's parties, so that a push, its retry and its sync event carry no join credentials
    for the blocked user (nor anyone: members and parties ask ``POST
    /api/conferences/{id}/media`` or ``/api/calls/{id}/media``, which refuse a blocked user)."""
    return bool(record.get("media_withheld"))
