"""The owner side: write one push intent inside the caller's own transaction.

With asyncpg::

    async with conn.transaction():
        message_id = await insert_message(conn, ...)
        await enqueue(conn, OutboxIntent(
            kind=RealtimeDispatchKind.MESSAGE_RECEIVED, target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id, message_id=message_id, seq=seq))

With any other driver, :func:`enqueue_statement` gives the SQL and its parameters in the
``%(name)s`` style that psycopg and SQLAlchemy's ``text()`` (after ``:name`` conversion) accept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from realtime_dispatch.errors import IntentError
from realtime_dispatch.outbox.model import OutboxIntent
from realtime_dispatch.values.ids import new_id

_COLUMNS = (
    "id",
    "kind",
    "target_kind",
    "chat_id",
    "target_user_id",
    "message_id",
    "ref_id",
    "session_kind",
    "seq",
)

_TABLE = "messenger.realtime_outbox"
_REQUIRED = ("id", "kind", "target_kind")

ENQUEUE_SQL = (
    f"INSERT INTO {_TABLE} ({', '.join(_COLUMNS)})"
    f" VALUES ({', '.join(f'${i}' for i in range(1, len(_COLUMNS) + 1))})"
)
ENQUEUE_SQL_NAMED = (
    f"INSERT INTO {_TABLE} ({', '.join(_COLUMNS)})"
    f" VALUES ({', '.join(f'%({c})s' for c in _COLUMNS)})"
)


def enqueue_select_sql(values: Mapping[str, str], source: str) -> str:
    """``INSERT INTO messenger.realtime_outbox (…) SELECT … FROM source``: the outbox insert as
    a data-modifying CTE of an owner's own statement (domain change and push intent in one
    round trip). ``values`` maps column names to SQL expressions over ``source``; omitted
    columns stay NULL. Raises ValueError for an unknown column or a missing id, kind or
    target_kind. The expressions are pasted in as SQL: pass parameters, never user text.
    """
    unknown = sorted(set(values) - set(_COLUMNS))
    missing = [column for column in _REQUIRED if column not in values]
    if unknown or missing:
        raise ValueError(f"outbox columns: unknown {unknown}, missing {missing}")
    columns = [column for column in _COLUMNS if column in values]
    return (
        f"INSERT INTO {_TABLE} ({', '.join(columns)})"
        f" SELECT {', '.join(values[column] for column in columns)} FROM {source}"
    )


class _Executor(Protocol):
    async def execute(self, query: str, *args: object) -> str: ...

    def is_in_transaction(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class EnqueueStatement:
    """Driver-neutral form: ``sql`` with ``%(name)s`` placeholders and its ``params``."""

    sql: str
    params: dict[str, object]

    @property
    def sqlalchemy_sql(self) -> str:
        """The same statement with ``:name`` placeholders, for ``sqlalchemy.text``."""
        sql = self.sql
        for column in _COLUMNS:
            sql = sql.replace(f"%({column})s", f":{column}")
        return sql


def _values(intent: OutboxIntent, entry_id: UUID) -> tuple[object, ...]:
    return (
        entry_id,
        intent.kind.value,
        intent.target_kind.value,
        intent.chat_id,
        intent.target_user_id,
        intent.message_id,
        intent.ref_id,
        intent.session_kind.value if intent.session_kind else None,
        intent.seq,
    )


def enqueue_statement(intent: OutboxIntent, *, entry_id: UUID | None = None) -> EnqueueStatement:
    """The INSERT for ``intent`` without running it (psycopg, SQLAlchemy, raw DB-API)."""
    values = _values(intent, entry_id or new_id())
    return EnqueueStatement(ENQUEUE_SQL_NAMED, dict(zip(_COLUMNS, values, strict=True)))


async def enqueue(
    conn: _Executor, *intents: OutboxIntent, entry_ids: Sequence[UUID] | None = None
) -> list[UUID]:
    """Insert ``intents`` through ``conn`` (an asyncpg connection inside an open transaction).

    Refuses to run outside a transaction: a push intent committed apart from its domain change
    would break persist-then-push. Returns the new outbox ids (UUIDv7, in order), or
    ``entry_ids`` (one per intent) when given: the row id is the push's ``eventId``, so an
    owner may give the row the id of the domain event it announces.
    """
    if not conn.is_in_transaction():
        raise IntentError("enqueue must run inside the owner's transaction", code="NoTransaction")
    if entry_ids is not None and len(entry_ids) != len(intents):
        raise ValueError("entry_ids: one id per intent")
    ids: list[UUID] = []
    for index, intent in enumerate(intents):
        entry_id = new_id() if entry_ids is None else entry_ids[index]
        await conn.execute(ENQUEUE_SQL, *_values(intent, entry_id))
        ids.append(entry_id)
    return ids
