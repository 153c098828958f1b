"""The payload-building seam: a batch of claimed rows → one :class:`Push` (or a permanent
error) per row, with one projection query per kind group, never one per row.

:class:`CompositePayloadBuilder` parses each row into its typed intent (a row nobody could have
enqueued fails with :class:`PayloadBuildError`), groups rows by the kind builder registered for
them, and calls each builder once with its whole group. Every payload leaves here carrying its
row's id as ``eventId`` (:func:`~.encoding.stamp_event_id`): set once here, for all kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias
from uuid import UUID

from realtime_dispatch.database import DbConnection
from realtime_dispatch.dispatch.projections.encoding import stamp_event_id
from realtime_dispatch.errors import (
    IntentError,
    PayloadBuildError,
    RealtimeDispatchError,
    TargetGone,
)
from realtime_dispatch.outbox.model import ClaimedRow, OutboxIntent, RealtimeDispatchKind
from realtime_dispatch.push import Push

BuildResults: TypeAlias = dict[UUID, Push | RealtimeDispatchError]


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


class CompositePayloadBuilder:
    def __init__(self, builders: Iterable[KindBuilder]) -> None:
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
            built = await builder.build(conn, items)
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
        await _mark_gone_targets(conn, rows, results)
        return results


_CHATS_SQL = "SELECT id FROM messenger.chats WHERE id = ANY($1::uuid[])"


async def _mark_gone_targets(
    conn: DbConnection, rows: Sequence[ClaimedRow], results: BuildResults
) -> None:
    """A row whose entity is missing because its chat was deleted (the cascade took the entity)
    is not a defect: turn its not-found error into :class:`TargetGone`. One query, and only
    when some row of the batch is not found."""
    missing: dict[UUID, UUID] = {}
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
    alive = {r["id"] for r in await conn.fetch(_CHATS_SQL, chat_ids)}
    for row_id, chat_id in missing.items():
        if chat_id not in alive:
            results[row_id] = TargetGone("the target chat no longer exists", code="ChatGone")
