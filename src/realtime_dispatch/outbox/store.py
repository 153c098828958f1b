"""The dispatcher's and operators' SQL against ``messenger.realtime_outbox``: one method per
named query, rows turned into frozen values, driver errors translated here (the one I/O seam).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg

from realtime_dispatch.database import is_unavailable
from realtime_dispatch.dispatch.backoff import JITTER
from realtime_dispatch.errors import DatabaseUnavailable
from realtime_dispatch.ids import id_floor
from realtime_dispatch.outbox.model import ClaimedRow, RealtimeDispatchKind
from realtime_dispatch.outbox.queries import QUERIES
from realtime_dispatch.settings import RealtimeDispatchOptions


@contextlib.asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    """Turn "database unreachable" driver errors into :class:`DatabaseUnavailable`."""
    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        if is_unavailable(exc):
            raise DatabaseUnavailable(f"{type(exc).__name__}") from exc
        raise


@dataclass(frozen=True, slots=True)
class Outcomes:
    """One pass-slice's outcomes, written together in one transaction."""

    done: Sequence[tuple[UUID, int]] = ()
    retry: Sequence[tuple[UUID, int, str]] = ()
    quarantine: Sequence[tuple[UUID, int, str]] = ()


@dataclass(frozen=True, slots=True)
class WrittenOutcomes:
    done_lags: Sequence[float]
    retried: int
    quarantined: set[UUID]


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    quarantined: int
    done: int
    oldest_pending_age_seconds: float

    def as_json(self) -> dict[str, int | float]:
        return {
            "pending": self.pending,
            "quarantined": self.quarantined,
            "done": self.done,
            "oldestPendingAgeSeconds": round(self.oldest_pending_age_seconds, 3),
        }


def _row(record: asyncpg.Record) -> ClaimedRow:
    return ClaimedRow(
        id=record["id"],
        kind=record["kind"],
        target_kind=record["target_kind"],
        chat_id=record["chat_id"],
        target_user_id=record["target_user_id"],
        message_id=record["message_id"],
        ref_id=record["ref_id"],
        session_kind=record["session_kind"],
        seq=record["seq"],
        attempts=record["attempts"],
        row_version=record["row_version"],
        created_at=record["created_at"],
    )


class OutboxStore:
    """Named queries over a pool. Each method is one short transaction (or one statement)."""

    def __init__(self, pool: asyncpg.Pool, options: RealtimeDispatchOptions) -> None:
        self._pool = pool
        self._options = options

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    async def claim(self, limit: int) -> list[ClaimedRow]:
        o = self._options
        async with translate_errors():
            records = await self._pool.fetch(
                QUERIES["claim"], limit, o.backoff_base, o.backoff_factor, o.backoff_cap, JITTER
            )
        rows = [_row(r) for r in records]
        rows.sort(key=lambda r: r.id)  # UPDATE … RETURNING does not keep the CTE's order
        return rows

    async def write_outcomes(self, outcomes: Outcomes) -> WrittenOutcomes:
        """All of a slice's outcomes in one commit; rows whose row_version moved are left alone."""
        lags: list[float] = []
        retried = 0
        quarantined: set[UUID] = set()
        async with translate_errors(), self._pool.acquire() as conn, conn.transaction():
            if outcomes.done:
                ids, versions = zip(*outcomes.done, strict=True)
                for record in await conn.fetch(QUERIES["mark_done"], list(ids), list(versions)):
                    lags.append(max(0.0, float(record["lag"])))
            if outcomes.retry:
                ids, versions, errors = zip(*outcomes.retry, strict=True)
                retried = len(
                    await conn.fetch(QUERIES["mark_retry"], list(ids), list(versions), list(errors))
                )
            if outcomes.quarantine:
                ids, versions, errors = zip(*outcomes.quarantine, strict=True)
                records = await conn.fetch(
                    QUERIES["mark_quarantined"], list(ids), list(versions), list(errors)
                )
                quarantined = {r["id"] for r in records}
        return WrittenOutcomes(lags, retried, quarantined)

    async def release(self, rows: Sequence[ClaimedRow]) -> int:
        if not rows:
            return 0
        async with translate_errors():
            records = await self._pool.fetch(
                QUERIES["release"], [r.id for r in rows], [r.row_version for r in rows]
            )
        return len(records)

    async def requeue(
        self,
        *,
        ids: Sequence[UUID] = (),
        kind: RealtimeDispatchKind | None = None,
        everything: bool = False,
    ) -> int:
        """Quarantined → Pending, attempts 0. Exactly one selector must be given."""
        if sum((bool(ids), kind is not None, everything)) != 1:
            raise ValueError("give exactly one of ids, kind, everything")
        async with translate_errors():
            if ids:
                status = await self._pool.execute(QUERIES["requeue_ids"], list(ids))
            elif kind is not None:
                status = await self._pool.execute(QUERIES["requeue_kind"], kind.value)
            else:
                status = await self._pool.execute(QUERIES["requeue_all"])
        return int(status.rsplit(" ", 1)[1])

    async def purge_done(
        self, *, older_than: float, limit: int = 1000, now: datetime | None = None
    ) -> int:
        """Delete up to ``limit`` Done rows created more than ``older_than`` seconds ago."""
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=older_than)
        async with translate_errors():
            status = await self._pool.execute(QUERIES["purge_done"], id_floor(cutoff), limit)
        return int(status.rsplit(" ", 1)[1])

    async def pending_count(self) -> int:
        async with translate_errors():
            return int(await self._pool.fetchval(QUERIES["pending_count"]))

    async def stats(self) -> OutboxStats:
        async with translate_errors():
            record = await self._pool.fetchrow(QUERIES["stats"])
        assert record is not None
        return OutboxStats(
            pending=int(record["pending"]),
            quarantined=int(record["quarantined"]),
            done=int(record["done"]),
            oldest_pending_age_seconds=float(record["oldest_pending_age_seconds"]),
        )
