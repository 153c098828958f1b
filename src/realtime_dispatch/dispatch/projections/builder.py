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
manifest's ``chat_alive`` says its chat is gone: then it is :class:`TargetGone`.

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

from realtime_dispatch.database import DbConnection, is_unavailable
from realtime_dispatch.dispatch.projections.encoding import stamp_event_id
from realtime_dispatch.errors import (
    DatabaseUnavailable,
    IntentError,
    PayloadBuildError,
    RealtimeDispatchError,
    TargetGone,
    TransientError,
)
from realtime_dispatch.keys import Key
from realtime_dispatch.outbox.model import ClaimedRow, OutboxIntent, RealtimeDispatchKind
from realtime_dispatch.push import Push

BuildResults: TypeAlias = dict[UUID, Push | RealtimeDispatchError]

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
    operator may fix the manifest), bounded by max_attempts. The reason names the query and
    the SQLSTATE, never the server's message (it can quote values)."""
    if is_unavailable(exc):
        return DatabaseUnavailable(f"the {query} query lost the database ({type(exc).__name__})")
    if isinstance(exc, TransientError):
        return exc
    state = exc.sqlstate if isinstance(exc, asyncpg.PostgresError) else None
    detail = f"SQLSTATE {state}" if state else type(exc).__name__
    return TransientError(f"the {query} query failed ({detail})", code="QueryFailed")


async def build_apart(
    query: str, work: Awaitable[BuildResults], items: Sequence[RowIntent]
) -> BuildResults:
    """Await ``work`` (the build of ``items`` by the ``query`` they need), its failure kept to
    those rows: each gets the error of :func:`query_failed`, logged once as
    ``projection_query_failed``."""
    try:
        return await work
    except Exception as exc:
        error = query_failed(exc, query)
        _log.error("projection_query_failed", query=query, error=error.describe(), rows=len(items))
        return dict.fromkeys((item.row.id for item in items), error)


class CompositePayloadBuilder:
    def __init__(
        self, builders: Iterable[KindBuilder], *, chat_alive_sql: str | None = None
    ) -> None:
        """``chat_alive_sql``: the manifest's ``chat_alive`` query (``None``: a row whose
        referenced entity is missing is always quarantined)."""
        self._chat_alive_sql = chat_alive_sql
        self._by_kind: dict[RealtimeDispatchKind, KindBuilder] = {}
        for builder in builders:
            for kind in builder.kinds:
                if kind in self._by_kind:
                    raise ValueError(f"two builders for {kind}")
                self._by_kind[kind] = builder

    async def build(self, conn: DbConnection, rows: Sequence[ClaimedRow]) -> BuildResults:
        results: BuildResults = {}
        groups: dict[int, tuple[KindBuilder, list[RowIntent]]] = {}
        for row in rows:
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
        if self._chat_alive_sql is not None:
            await _mark_gone_targets(conn, self._chat_alive_sql, rows, results)
        return results


def _query_of(builder: KindBuilder) -> str:
    return str(getattr(builder, "query", type(builder).__name__))


async def _mark_gone_targets(
    conn: DbConnection, chat_alive_sql: str, rows: Sequence[ClaimedRow], results: BuildResults
) -> None:
    """A row whose entity is missing because its chat was deleted (the cascade took the entity)
    is not a defect: turn its not-found error into :class:`TargetGone` when ``chat_alive``
    leaves its chat out. One query, and only when some row of the batch is not found; if it
    fails, those rows retry (nothing tells gone from defect)."""
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
        alive = {r["chat_id"] for r in await conn.fetch(chat_alive_sql, chat_ids)}
    except Exception as exc:
        error = query_failed(exc, "chat_alive")
        _log.error("projection_query_failed", query="chat_alive", error=error.describe())
        results.update(dict.fromkeys(missing, error))
        return
    for row_id, chat_id in missing.items():
        if chat_id not in alive:
            results[row_id] = TargetGone("the target chat no longer exists", code="ChatGone")
