"""Read models for operators, over the outbox (statistics and requeue come from
:class:`~realtime_dispatch.outbox.store.OutboxStore`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg
from pydantic.alias_generators import to_camel

from realtime_dispatch.auth import revocation_store
from realtime_dispatch.auth.revocations import Revocation
from realtime_dispatch.database.connections import translate_errors
from realtime_dispatch.outbox.queries import load_queries
from realtime_dispatch.outbox.store import OutboxStats, OutboxStore
from realtime_dispatch.values.ids import id_floor
from realtime_dispatch.values.keys import Key

QUERIES = load_queries("realtime_dispatch.ops")


def _json_value(value: object) -> object:
    """A read model's value as the ops API writes it: a UUID (an owner's key too) as its
    string, a time in ISO 8601, anything else (a bigint key, a count, a text) as is."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class _ReadModel:
    """A dataclass whose JSON is its fields in order, named in camelCase."""

    __slots__ = ()

    def as_json(self) -> dict[str, object]:
        return {
            to_camel(field.name): _json_value(getattr(self, field.name))
            for field in fields(self)  # type: ignore[arg-type]
        }


@dataclass(frozen=True, slots=True)
class QuarantinedRow(_ReadModel):
    id: UUID
    kind: str
    target_kind: str
    chat_id: Key | None
    target_user_id: Key | None
    session_kind: str | None
    attempts: int
    last_error: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class LockHolder(_ReadModel):
    pid: int
    application_name: str
    client_addr: str | None
    backend_start: datetime
    state: str | None


@dataclass(frozen=True, slots=True)
class RecentLag(_ReadModel):
    window_seconds: float
    done: int
    p50: float | None
    p95: float | None


class OpsService:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.store = OutboxStore(pool)

    async def stats(self) -> OutboxStats:
        return await self.store.stats()

    async def quarantined(
        self, *, kind: str | None = None, limit: int = 100
    ) -> list[QuarantinedRow]:
        """``kind``: a built-in or declared kind's name (None: every kind)."""
        async with translate_errors():
            records = await self._pool.fetch(QUERIES["quarantined"], kind, limit)
        return [QuarantinedRow(**dict(r)) for r in records]

    async def quarantined_by_kind(self) -> dict[str, int]:
        async with translate_errors():
            records = await self._pool.fetch(QUERIES["quarantined_by_kind"])
        return {r["kind"]: int(r["rows"]) for r in records}

    async def lock_holder(self) -> LockHolder | None:
        async with translate_errors():
            record = await self._pool.fetchrow(QUERIES["lock_holder"])
        if record is None:
            return None
        return LockHolder(
            pid=record["pid"],
            application_name=record["application_name"] or "",
            client_addr=record["client_addr"],
            backend_start=record["backend_start"],
            state=record["state"],
        )

    async def recent_lag(self, window_seconds: float = 60.0) -> RecentLag:
        since = id_floor(datetime.now(UTC) - timedelta(seconds=window_seconds))
        async with translate_errors():
            record = await self._pool.fetchrow(QUERIES["recent_lag"], since)
        assert record is not None
        return RecentLag(
            window_seconds=window_seconds,
            done=int(record["done"]),
            p50=None if record["p50"] is None else float(record["p50"]),
            p95=None if record["p95"] is None else float(record["p95"]),
        )

    async def requeue(self, *, ids: list[UUID] | None = None, kind: str | None = None) -> int:
        return await self.store.requeue(ids=ids or (), kind=kind)

    async def revoke(self, user_id: Key) -> Revocation:
        """Cut ``user_id`` off: tokens issued until now are refused, connections closed."""
        return await revocation_store.revoke(self._pool, user_id)

    async def lift_revocation(self, user_id: Key) -> Revocation | None:
        return await revocation_store.lift(self._pool, user_id)

    async def revocations(self) -> list[Revocation]:
        return await revocation_store.revocations(self._pool)
