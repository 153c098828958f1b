"""The payload-building seam: a batch of claimed rows → one :class:`Push` (or a permanent
error) per row, with one projection query per kind group, never one per row.

:class:`CompositePayloadBuilder` parses each row into its typed intent (a row nobody could have
enqueued fails with :class:`PayloadBuildError`), groups rows by the kind builder registered for
them, and calls each builder once with its whole group. The groups' queries run on their own:
one that fails gives its error to the rows it serves only (retried, bounded by max_attempts),
never to the rest of the batch.

The SQL comes from the projection manifest (:mod:`realtime_dispatch.manifest`): a builder whose
query the manifest leaves out answers :func:`disabled` (``KindDisabled``, quarantined at once
with the alert). A row whose referenced entity is missing is a defect (quarantined) unless the
manifest's ``deleted_chats`` returns its chat (known to be deleted): then it is
:class:`TargetGone`. A manifest of an earlier version may still have ``chat_alive`` instead
(deprecated): then a chat it leaves out counts as deleted.

Every payload leaves here carrying its row's id as ``eventId``
(:func:`~.encoding.stamp_event_id`): set once here, for all kinds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias
from uuid import UUID

import asyncpg
import structlog

from realtime_dispatch.database.connections import DbConnection, is_unavailable
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.encoding import stamp_event_id
from realtime_dispatch.errors import (
    DatabaseUnavailable,
    IntentError,
    PayloadBuildError,
    RealtimeDispatchError,
    TargetGone,
    TransientError,
)
from realtime_dispatch.manifest.kinds import DeclaredKind
from realtime_dispatch.outbox.model import ClaimedRow, OutboxIntent, RealtimeDispatchKind
from realtime_dispatch.values.keys import Key

BuildResults: TypeAlias = dict[UUID, Push | RealtimeDispatchError]
_BUILTIN = frozenset(kind.value for kind in RealtimeDispatchKind)

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RowIntent:
    row: ClaimedRow
    intent: OutboxIntent


class KindBuilder(Protocol):
    kinds: frozenset[RealtimeDispatchKind]

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        """Build every item; return a result for each row id."""
        ...


class DeclaredBuilder(Protocol):
    """What :class:`CompositePayloadBuilder` uses of a declared kind's builder
    (:class:`~.declared.DeclaredKindBuilder`)."""

    @property
    def kind(self) -> DeclaredKind: ...

    @property
    def query(self) -> str: ...

    async def build_rows(self, conn: DbConnection, rows: Sequence[ClaimedRow]) -> BuildResults: ...

    def ids_payload(self, row: ClaimedRow) -> Push: ...


class PayloadBuilder(Protocol):
    async def build(self, conn: DbConnection, rows: Sequence[ClaimedRow]) -> BuildResults: ...


def disabled(items: Sequence[RowIntent], query: str) -> BuildResults:
    """The answer of a builder whose query the manifest leaves out: every row is quarantined at
    once (with the alert), never silently Done."""
    return {
        item.row.id: PayloadBuildError(
            f"{item.intent.kind} is disabled: the projection manifest has no {query} query",
            code="KindDisabled",
        )
        for item in items
    }


def query_failed(exc: Exception, query: str) -> RealtimeDispatchError:
    """A projection query that raised: the rows it serves retry (the database may be back, the
    operator may fix the manifest), bounded by max_attempts. The reason names the query, the
    server's error class and SQLSTATE and, for a statement the server could not run as written
    (class 42: a missing table or column, a type mismatch), its message: that one names the
    statement's objects. Other messages can quote row values, so they are left out."""
    if is_unavailable(exc):
        return DatabaseUnavailable(f"the {query} query lost the database ({type(exc).__name__})")
    if isinstance(exc, TransientError):
        return exc
    return TransientError(f"the {query} query failed ({_server_error(exc)})", code="QueryFailed")


def _server_error(exc: Exception) -> str:
    """``UndefinedTableError, SQLSTATE 42P01: relation "x" does not exist``; no message for
    SQLSTATE classes that may quote data."""
    if not isinstance(exc, asyncpg.PostgresError) or not exc.sqlstate:
        return type(exc).__name__
    detail = f"{type(exc).__name__}, SQLSTATE {exc.sqlstate}"
    message = str(exc.args[0]) if exc.args else ""
    if exc.sqlstate.startswith("42") and message and "\n" not in message:
        detail += f": {message[:200]}"
    return detail


async def build_apart(
    query: str, work: Awaitable[BuildResults], items: Sequence[RowIntent | ClaimedRow]
) -> BuildResults:
    """Await ``work`` (the build of ``items`` by the ``query`` they need), its failure kept to
    those rows: each gets the error of :func:`query_failed`, logged once as
    ``projection_query_failed``."""
    try:
        return await work
    except Exception as exc:
        error = query_failed(exc, query)
        _log.error("projection_query_failed", query=query, error=error.describe(), rows=len(items))
        return dict.fromkeys(
            (item.row.id if isinstance(item, RowIntent) else item.id for item in items), error
        )


class CompositePayloadBuilder:
    def __init__(
        self,
        builders: Iterable[KindBuilder],
        *,
        deleted_chats_sql: str | None = None,
        chat_alive_sql: str | None = None,
        declared: Iterable[DeclaredBuilder] = (),
    ) -> None:
        """``deleted_chats_sql``: the manifest's ``deleted_chats`` query, or else
        ``chat_alive_sql``, the deprecated ``chat_alive`` (neither: a row whose referenced
        entity is missing is always quarantined). ``declared``: a builder per kind the
        manifest declares (a row of a kind neither built in nor declared is quarantined
        ``KindUndeclared``)."""
        self._declared = {builder.kind.name: builder for builder in declared}
        self._gone: _GoneQuery | None = None
        if deleted_chats_sql is not None:
            self._gone = _GoneQuery("deleted_chats", deleted_chats_sql, returns_gone=True)
        elif chat_alive_sql is not None:
            self._gone = _GoneQuery("chat_alive", chat_alive_sql, returns_gone=False)
        self._by_kind: dict[RealtimeDispatchKind, KindBuilder] = {}
        for builder in builders:
            for kind in builder.kinds:
                if kind in self._by_kind:
                    raise ValueError(f"two builders for {kind}")
                self._by_kind[kind] = builder

    async def build(self, conn: DbConnection, rows: Sequence[ClaimedRow]) -> BuildResults:
        results: BuildResults = {}
        groups: dict[int, tuple[KindBuilder, list[RowIntent]]] = {}
        own: dict[str, list[ClaimedRow]] = {}
        for row in rows:
            if row.kind not in _BUILTIN:
                if row.kind in self._declared:
                    own.setdefault(row.kind, []).append(row)
                else:
                    results[row.id] = PayloadBuildError(
                        f"kind {row.kind} is not declared in the projection manifest",
                        code="KindUndeclared",
                    )
                continue
            try:
                intent = row.intent()
            except IntentError as exc:
                results[row.id] = PayloadBuildError(str(exc), code=exc.code)
                continue
            builder = self._by_kind.get(intent.kind)
            if builder is None:
                results[row.id] = PayloadBuildError(
                    f"no payload builder for {intent.kind}", code="NoBuilder"
                )
                continue
            group = groups.get(id(builder))
            if group is None:
                group = groups[id(builder)] = (builder, [])
            group[1].append(RowIntent(row, intent))
        for builder, items in groups.values():
            built = await build_apart(_query_of(builder), builder.build(conn, items), items)
            for item in items:
                result = built.get(item.row.id)
                if result is None:
                    result = PayloadBuildError("builder returned nothing", code="NotBuilt")
                elif isinstance(result, Push):
                    result = Push(
                        result.group,
                        result.target,
                        payload_json=stamp_event_id(result.payload_json, item.row.id),
                    )
                results[item.row.id] = result
        for name, own_rows in own.items():
            declared = self._declared[name]
            built = await build_apart(declared.query, declared.build_rows(conn, own_rows), own_rows)
            for row in own_rows:
                results[row.id] = _stamped(built.get(row.id), row.id)
        if self._gone is not None:
            await _mark_gone_targets(conn, self._gone, rows, results)
            for name, own_rows in own.items():
                declared = self._declared[name]
                if declared.kind.deliver_when_chat_deleted:
                    for row in own_rows:
                        if isinstance(results[row.id], TargetGone):
                            results[row.id] = _stamped(declared.ids_payload(row), row.id)
        return results


def _stamped(
    result: Push | RealtimeDispatchError | None, row_id: UUID
) -> Push | RealtimeDispatchError:
    """A built result with the row's id as ``eventId`` (nothing built: ``NotBuilt``)."""
    if result is None:
        return PayloadBuildError("builder returned nothing", code="NotBuilt")
    if isinstance(result, Push):
        return Push(
            result.group, result.target, payload_json=stamp_event_id(result.payload_json, row_id)
        )
    return result


def _query_of(builder: KindBuilder) -> str:
    return str(getattr(builder, "query", type(builder).__name__))


@dataclass(frozen=True, slots=True)
class _GoneQuery:
    name: str
    sql: str
    returns_gone: bool
    """True: the query returns the deleted chats of $1; False (``chat_alive``): the others."""


async def _mark_gone_targets(
    conn: DbConnection, query: _GoneQuery, rows: Sequence[ClaimedRow], results: BuildResults
) -> None:
    """A row whose entity is missing because its chat was deleted (the cascade took the entity)
    is not a defect: turn its not-found error into :class:`TargetGone` when the query says its
    chat is deleted. One query, and only when some row of the batch is not found; if it fails,
    those rows retry (nothing tells gone from defect)."""
    missing: dict[UUID, Key] = {}
    for row in rows:
        result = results.get(row.id)
        if (
            row.chat_id is not None
            and isinstance(result, PayloadBuildError)
            and result.code.endswith("NotFound")
        ):
            missing[row.id] = row.chat_id
    if not missing:
        return
    chat_ids = list(set(missing.values()))
    try:
        returned = {r["chat_id"] for r in await conn.fetch(query.sql, chat_ids)}
    except Exception as exc:
        error = query_failed(exc, query.name)
        _log.error("projection_query_failed", query=query.name, error=error.describe())
        results.update(dict.fromkeys(missing, error))
        return
    for row_id, chat_id in missing.items():
        if (chat_id in returned) == query.returns_gone:
            results[row_id] = TargetGone("the target chat no longer exists", code="ChatGone")
