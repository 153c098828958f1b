"""The shape shared by the non-message builders: rows reference one entity by ``ref_id``; the
builder loads every referenced entity of the batch with one query, checks that each row's
target is allowed to see it, and shapes the payload from the entity's current state.

:class:`ColumnsBuilder` does it for the catalogue's kinds with no builder of their own, from the
kind's row and contract alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent, disabled
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, Shaped, encoded
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.manifest.contract import QueryContract
from realtime_dispatch.outbox.model import OutboxIntent, RealtimeDispatchKind, SessionKind
from realtime_dispatch.values.catalogue import snake
from realtime_dispatch.values.keys import Key


class RefProjectionBuilder:
    """Subclasses set ``kinds``, ``query`` (the manifest query it reads: one ``$1 uuid[]``
    parameter, an ``id`` column), ``entity`` (for the not-found reason) and implement
    :meth:`shape`. ``sql`` is that query's text from the manifest (``None``: the manifest has
    none, and the kinds are disabled); ``encoder`` writes the shaped payload's JSON
    (:data:`~.encoding.FAST` unless a test swaps it)."""

    kinds: frozenset[RealtimeDispatchKind]
    query: str
    entity: str

    def __init__(self, *, sql: str | None, encoder: PayloadEncoder = FAST) -> None:
        self.sql = sql
        self.encoder = encoder

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        if self.sql is None:
            return disabled(items, self.query)
        key = self.key
        ids = list({k for item in items if (k := key(item.intent)) is not None})
        records = {r["id"]: r for r in await conn.fetch(self.sql, ids)} if ids else {}
        results: BuildResults = {}
        for item in items:
            intent = item.intent
            ref = key(intent)
            record = records.get(ref) if ref is not None else None
            if record is None:
                results[item.row.id] = PayloadBuildError(
                    f"referenced {self.entity} does not exist", code=f"{self.entity}NotFound"
                )
                continue
            try:
                model, fields = self.shape(intent, record)
            except PayloadBuildError as exc:
                results[item.row.id] = exc
                continue
            payload = encoded(self.encoder, model, fields)
            if isinstance(payload, PayloadBuildError):
                results[item.row.id] = payload
                continue
            results[item.row.id] = Push(intent.group, intent.kind.event_name, payload_json=payload)
        return results

    def key(self, intent: OutboxIntent) -> Key | None:
        """The row's id of the entity (its ``ref_id``)."""
        return intent.ref_id

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


class ColumnsBuilder(RefProjectionBuilder):
    """The catalogue's kinds of one manifest query that no builder of their own claims: each
    payload is its contract's fields read from the query's columns of the same names (the
    entity's ``id`` column as ``<entity>_id``: ``recording_id``), the row's target checked as
    its catalogue row says (:func:`check_target`), and a required ``…_at`` field whose column
    is null refused as a step the entity has not taken (``stopped_at`` →
    ``NotStopped``). So a kind of this shape is its catalogue row and its contract, with no
    code here. ``kinds``: each kind's target (``chat``, ``user``, ``session``) and contract."""

    def __init__(
        self,
        query: QueryContract,
        kinds: Mapping[RealtimeDispatchKind, tuple[str, type[Contract]]],
        *,
        sql: str | None,
        encoder: PayloadEncoder = FAST,
    ) -> None:
        super().__init__(sql=sql, encoder=encoder)
        self.query = query.name
        self.entity = query.entity
        self.kinds = frozenset(kinds)
        self._by_message = query.param == "message_id"
        self._id_field = f"{snake(query.entity)}_id"
        self._plans = {
            kind: _ColumnsPlan.of(target, model, query, self._id_field)
            for kind, (target, model) in kinds.items()
        }

    def key(self, intent: OutboxIntent) -> Key | None:
        return intent.message_id if self._by_message else intent.ref_id

    def shape(self, intent: OutboxIntent, record: asyncpg.Record) -> Shaped:
        plan = self._plans[intent.kind]
        check_target(plan.target, intent, record, plan.audience)
        fields = {field: record.get(column) for field, column in plan.columns}
        for field, word in plan.steps:
            require(
                fields.get(field) is not None,
                f"{snake(self.entity).replace('_', ' ')} not {word.replace('_', ' ')}",
                f"Not{_pascal(word)}",
            )
        return plan.model, fields


@dataclass(frozen=True, slots=True)
class _ColumnsPlan:
    """How :class:`ColumnsBuilder` shapes one kind: the contract's fields with the column each
    reads, its required ``…_at`` fields (field, step word), its target and audience column."""

    target: str
    model: type[Contract]
    columns: tuple[tuple[str, str], ...]
    steps: tuple[tuple[str, str], ...]
    audience: str

    @classmethod
    def of(
        cls, target: str, model: type[Contract], query: QueryContract, id_field: str
    ) -> _ColumnsPlan:
        if target == "user" and not query.audience:
            raise ValueError(f"the {query.name} query names no audience column for user kinds")
        fields = [name for name in model.model_fields if name != "event_id"]
        columns = tuple((name, "id" if name == id_field else name) for name in fields)
        unread = [name for name, column in columns if column not in query.column_names]
        if unread:
            raise ValueError(
                f"{model.__name__}: no column of the {query.name} query for " + ", ".join(unread)
            )
        return cls(
            target,
            model,
            columns,
            tuple(
                (name, name.removesuffix("_at"))
                for name in fields
                if name.endswith("_at") and model.model_fields[name].is_required()
            ),
            query.audience,
        )


def check_target(
    target: str, intent: OutboxIntent, record: asyncpg.Record, audience: str = ""
) -> None:
    """The row's audience is the entity's: its chat (``chat``), the ``audience`` column's user
    (``user``), or as the session kind says (``session``: :func:`require_session`)."""
    if target == "session":
        require_session(intent, record)
    elif target == "chat":
        require_chat(intent, record)
    else:
        require_user(intent, record[audience])


def _pascal(words: str) -> str:
    return "".join(part.capitalize() for part in words.split("_"))


def media_withheld(record: asyncpg.Record) -> bool:
    """The optional ``media_withheld`` column of a conference's or a 1:1 call's projection:
    true where the blacklist holds in its chat (a member blocked there by another) or between
    the call's parties, so that a push, its retry and its sync event carry no join credentials
    for the blocked user (nor anyone: members and parties ask ``POST
    /api/conferences/{id}/media`` or ``/api/calls/{id}/media``, which refuse a blocked user)."""
    return bool(record.get("media_withheld"))
