"""The dispatcher's and operators' SQL against ``messenger.realtime_outbox``: one method per
named query, rows turned into frozen values, driver errors translated here (the one I/O seam).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg

from realtime_dispatch.database.connections import DbConnection, translate_errors
from realtime_dispatch.outbox.backoff import JITTER, Backoff
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.partitions import WHOLE, Partition
from realtime_dispatch.outbox.queries import QUERIES
from realtime_dispatch.values.ids import id_floor


@dataclass(frozen=True, slots=True)
class Outcomes:
    """One pass-slice's outcomes, written together in one transaction."""

    done: Sequence[tuple[UUID, int]] = ()
    retry: Sequence[tuple[UUID, int, str]] = ()
    quarantine: Sequence[tuple[UUID, int, str]] = ()
    gone: Sequence[tuple[UUID, int, str]] = ()


@dataclass(frozen=True, slots=True)
class WrittenOutcomes:
    """The outcomes that were written: a row whose row_version moved since its claim (another
    runner, a release, an operator) is in none of these."""

    done_lags: Sequence[float]
    retried: set[UUID]
    quarantined: set[UUID]
    gone: set[UUID] = field(default_factory=set)
    done: set[UUID] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    quarantined: int
    done: int
    """Done with a push (or a user push nobody was connected for): not :attr:`target_gone`."""
    oldest_pending_age_seconds: float
    target_gone: int = 0
    """Done without a push: the row's chat is deleted (``last_error`` = ``TargetGone:…``)."""

    def as_json(self) -> dict[str, int | float]:
        return {
            "pending": self.pending,
            "quarantined": self.quarantined,
            "done": self.done,
            "targetGone": self.target_gone,
            "oldestPendingAgeSeconds": round(self.oldest_pending_age_seconds, 3),
        }


class OutboxStore:
    """Named queries over a pool. Each method is one short transaction (or one statement)."""

    def __init__(
        self, pool: asyncpg.Pool, backoff: Backoff | None = None, *, claim_settings: str = ""
    ) -> None:
        """``claim_settings``: SQL run first in a transaction around every claim (``SET LOCAL``
        of the planner settings, behind a transaction pooler where they cannot be set per
        session); empty: the claim is one statement on its own."""
        self._pool = pool
        self._backoff = backoff or Backoff()
        self._claim_settings = claim_settings

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    async def claim(
        self,
        limit: int,
        *,
        conn: DbConnection | None = None,
        exclude: Collection[UUID] = (),
        partition: Partition = WHOLE,
        session: bool = False,
    ) -> list[ClaimedRow]:
        """Claim up to ``limit`` due rows of ``partition``, in id order, on ``conn`` (else the
        pool); never the ``exclude`` ids (rows this runner still has in flight). ``session``:
        ``conn`` is a session of the dispatcher's own, its settings set at connect (a runner's
        connection), so the ``claim_settings`` are not needed."""
        b = self._backoff
        backoff = (b.base, b.factor, b.cap, JITTER)
        args = (limit, *backoff, list(exclude), partition.count, partition.index)
        async with translate_errors():
            if self._claim_settings and not session:
                records = await self._claim_with_settings(conn, args)
            else:
                executor = self._pool if conn is None else conn
                records = await executor.fetch(QUERIES["claim"], *args)
        # RETURNING lists the columns in ClaimedRow's field order.
        return [ClaimedRow(*record) for record in records]

    async def _claim_with_settings(
        self, conn: DbConnection | None, args: tuple[object, ...]
    ) -> list[asyncpg.Record]:
        if conn is None:
            async with self._pool.acquire() as pooled:
                return await self._claim_with_settings(pooled, args)
        async with conn.transaction():
            await conn.execute(self._claim_settings)
            return await conn.fetch(QUERIES["claim"], *args)

    async def try_lock(self, conn: DbConnection, partition: Partition = WHOLE) -> bool:
        """Take ``partition``'s single-runner lock on ``conn`` (a session advisory lock: it lives
        as long as that connection, outside the pool); False when another session holds it."""
        async with translate_errors():
            return bool(await conn.fetchval(QUERIES["try_lock"], partition.lock_name))

    async def unlock(self, conn: DbConnection, partition: Partition = WHOLE) -> None:
        async with translate_errors():
            await conn.fetchval(QUERIES["unlock"], partition.lock_name)

    async def due_exists(self, partition: Partition = WHOLE) -> bool:
        """Is any row of ``partition`` due now?"""
        async with translate_errors():
            return bool(
                await self._pool.fetchval(QUERIES["due_exists"], partition.count, partition.index)
            )

    async def set_idle_flag(self, partition: Partition = WHOLE, *, idle: bool) -> None:
        """The idle flag that makes owners' inserts notify. Setting it waits for the writers
        that passed the trigger before it flipped (so a check for due rows after it sees them)."""
        key = (partition.count, partition.index)
        async with translate_errors(), self._pool.acquire() as conn:
            if idle:
                async with conn.transaction():
                    await conn.execute(QUERIES["wait_writers"])
                    await conn.execute(QUERIES["set_idle"], *key)
            else:
                await conn.execute(QUERIES["set_busy"], *key)

    async def forget_other_partitionings(self, partitions: int) -> None:
        """Drop the idle flags of another partition count (left by an earlier configuration)."""
        async with translate_errors():
            await self._pool.execute(QUERIES["forget_other_partitionings"], partitions)

    async def write_outcomes(
        self, outcomes: Outcomes, *, conn: DbConnection | None = None
    ) -> WrittenOutcomes:
        """All of a slice's outcomes in one commit; rows whose row_version moved are left alone.

        The usual slice has one kind of outcome: one statement, committed on its own, needs no
        explicit transaction (two round trips fewer)."""
        async with translate_errors():
            if conn is not None:
                return await self._write_outcomes(conn, outcomes)
            async with self._pool.acquire() as pooled:
                return await self._write_outcomes(pooled, outcomes)

    async def _write_outcomes(self, conn: DbConnection, outcomes: Outcomes) -> WrittenOutcomes:
        parts = sum(map(bool, (outcomes.done, outcomes.retry, outcomes.quarantine, outcomes.gone)))
        if parts > 1:
            async with conn.transaction():
                return await self._outcome_statements(conn, outcomes)
        return await self._outcome_statements(conn, outcomes)

    @staticmethod
    async def _outcome_statements(conn: DbConnection, outcomes: Outcomes) -> WrittenOutcomes:
        lags: list[float] = []
        done: set[UUID] = set()
        if outcomes.done:
            ids, versions = zip(*outcomes.done, strict=True)
            for record in await conn.fetch(QUERIES["mark_done"], list(ids), list(versions)):
                lags.append(max(0.0, float(record["lag"])))
                done.add(record["id"])
        retried = await _mark_with_error(conn, outcomes.retry, "Pending")
        quarantined = await _mark_with_error(conn, outcomes.quarantine, "Quarantined")
        gone = await _mark_with_error(conn, outcomes.gone, "Done")
        return WrittenOutcomes(lags, retried, quarantined, gone, done)

    async def release(self, rows: Sequence[ClaimedRow], *, conn: DbConnection | None = None) -> int:
        if not rows:
            return 0
        args = (QUERIES["release"], [r.id for r in rows], [r.row_version for r in rows])
        async with translate_errors():
            records = await (self._pool.fetch(*args) if conn is None else conn.fetch(*args))
        return len(records)

    async def requeue(
        self,
        *,
        ids: Sequence[UUID] = (),
        kind: str | None = None,
        everything: bool = False,
    ) -> int:
        """Quarantined → Pending, attempts 0. Exactly one selector must be given (``kind``: a
        built-in kind or a declared one's name)."""
        if sum((bool(ids), kind is not None, everything)) != 1:
            raise ValueError("give exactly one of ids, kind, everything")
        async with translate_errors():
            if ids:
                status = await self._pool.execute(QUERIES["requeue_ids"], list(ids))
            elif kind is not None:
                status = await self._pool.execute(QUERIES["requeue_kind"], str(kind))
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

    async def dead_tuples(self) -> tuple[int, int]:
        """(live, dead) row versions of the outbox, from the statistics."""
        async with translate_errors():
            record = await self._pool.fetchrow(QUERIES["dead_tuples"])
        return (0, 0) if record is None else (int(record["live"]), int(record["dead"]))

    async def vacuum(self) -> None:
        async with translate_errors():
            await self._pool.execute(QUERIES["vacuum"])

    async def pending_count(self) -> int:
        async with translate_errors():
            return int(await self._pool.fetchval(QUERIES["pending_count"]))

    async def quarantined_count(self) -> int:
        async with translate_errors():
            return int(await self._pool.fetchval(QUERIES["quarantined_count"]))

    async def stats(self) -> OutboxStats:
        async with translate_errors():
            record = await self._pool.fetchrow(QUERIES["stats"])
        assert record is not None
        return OutboxStats(
            pending=int(record["pending"]),
            quarantined=int(record["quarantined"]),
            done=int(record["done_all"]) - int(record["target_gone"]),
            oldest_pending_age_seconds=float(record["oldest_pending_age_seconds"]),
            target_gone=int(record["target_gone"]),
        )


async def _mark_with_error(
    conn: DbConnection, rows: Sequence[tuple[UUID, int, str]], status: str
) -> set[UUID]:
    """Write ``rows`` (id, row_version, error) with ``status``; the ids that were written."""
    if not rows:
        return set()
    ids, versions, errors = zip(*rows, strict=True)
    records = await conn.fetch(
        QUERIES["mark_with_error"], list(ids), list(versions), list(errors), status
    )
    return {r["id"] for r in records}
