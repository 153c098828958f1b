"""The recording-finalize retry (the spec's RecordingFinalizeRetryJob): a Stopped recording
whose ``available`` / ``failed`` callback never came is asked about again at the media
pipeline's status service (:mod:`.status_client`), with the dispatcher's backoff between asks,
up to ``max_attempts``; the answer settles it (:mod:`.finalize_policy`): ``RecordingAvailable``
or ``RecordingFailed`` to the session's audience, through outbox rows in the transaction that
changes the status. Without a status service, a recording still Stopped ``timeout`` seconds
after its stop fails with ``FinalizeTimeout``.

A claim (``finalize_attempts`` + 1 and the next ask's time, committed at once) comes before
the asks, and the asks happen outside any transaction. The outcome is written only to a
recording still Stopped: when the pipeline's callback lands while an ask is in flight, whichever
commits first wins and the other changes nothing (one outcome, one push). A crash between
claim and outcome costs one backoff: the next run asks again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from uuid import UUID

import asyncpg
import structlog

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.jobs.finalize_policy import (
    FINALIZE_TIMEOUT_CODE,
    Answer,
    AskResult,
    Verdict,
    decide,
)
from realtime_dispatch.messenger.jobs.metrics import RECORDING_FINALIZE, MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import JOB_BATCH_SIZE, RecordingFinalizeOptions
from realtime_dispatch.messenger.jobs.scheduled import QUERIES, BatchJob, JobRun
from realtime_dispatch.messenger.jobs.status_client import MAX_CONNECTIONS, RecordingStatusClient
from realtime_dispatch.messenger.sessions import MediaSession
from realtime_dispatch.outbox.backoff import JITTER
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind, SessionKind

_log = structlog.get_logger(__name__)
K = RealtimeDispatchKind


async def _announce(conn: DbConnection, kind: RealtimeDispatchKind, ids: Sequence[UUID]) -> None:
    """One push of ``kind`` per recording to its session's audience (inside the caller's
    transaction): a call's two parties, or the conference's chat."""
    if not ids:
        return
    for r in await conn.fetch(QUERIES["recording_sessions"], list(ids)):
        direct = r["session_kind"] == SessionKind.DIRECT.value
        session = MediaSession(
            SessionKind.DIRECT if direct else SessionKind.CONFERENCE,
            r["call_id"],
            r["conference_id"],
            r["chat_id"],
            (r["callee_user_id"], r["caller_user_id"]) if direct else (),
            False,
        )
        await enqueue(conn, *session.intents(kind, r["id"]))


async def settle_recordings(
    conn: DbConnection, *, available: Sequence[UUID], failed: Sequence[tuple[UUID, str]]
) -> tuple[list[UUID], list[UUID]]:
    """Available / Failed (with its code) for the recordings still Stopped, with their pushes,
    in one transaction; returns the ids that changed (a callback may have settled the rest)."""
    async with conn.transaction():
        made_available = [
            r["id"] for r in await conn.fetch(QUERIES["finalize_available"], list(available))
        ]
        made_failed: list[UUID] = []
        if failed:
            rows = await conn.fetch(
                QUERIES["finalize_failed"], [i for i, _ in failed], [c for _, c in failed]
            )
            made_failed = [r["id"] for r in rows]
        await _announce(conn, K.RECORDING_AVAILABLE, made_available)
        await _announce(conn, K.RECORDING_FAILED, made_failed)
    return made_available, made_failed


async def time_out_recordings(conn: DbConnection, *, older_than: float, limit: int) -> int:
    """Without a status service: Failed (``FinalizeTimeout``) for up to ``limit`` recordings
    stopped more than ``older_than`` seconds ago, in one transaction; returns how many."""
    async with conn.transaction():
        locked = [
            r["id"]
            for r in await conn.fetch(QUERIES["lock_timed_out_recordings"], older_than, limit)
        ]
        if not locked:
            return 0
        rows = await conn.fetch(
            QUERIES["finalize_failed"], locked, [FINALIZE_TIMEOUT_CODE] * len(locked)
        )
        await _announce(conn, K.RECORDING_FAILED, [r["id"] for r in rows])
    return len(locked)


class RecordingFinalizeRetry(BatchJob[RecordingFinalizeOptions]):
    """The job's work: claim a batch, ask about each (the client's pool bounds how many at
    once), write the batch's outcomes in one transaction; again while batches come back full
    and the run has time. A stop is honoured between asks: the rest wait for their backoff."""

    name = RECORDING_FINALIZE

    def __init__(
        self,
        pool: asyncpg.Pool,
        options: RecordingFinalizeOptions,
        metrics: MediaJobMetrics,
        *,
        client: RecordingStatusClient | None,
        batch_size: int = JOB_BATCH_SIZE,
    ) -> None:
        """``client``: the status service at ``options.status_url`` (None when unset)."""
        if (client is None) != (options.status_url is None):
            raise ValueError("a status client exactly when a status URL is set")
        super().__init__(pool, options, metrics, batch_size=batch_size)
        self._client = client

    async def run_once(self, run: JobRun) -> None:
        while not run.out_of_time():
            started = time.monotonic()
            if self._client is None:
                full = await self._time_out_batch(run)
            else:
                full = await self._ask_batch(run, self._client)
            if not full:
                return
            await run.rest(started)

    async def _time_out_batch(self, run: JobRun) -> bool:
        async with self._pool.acquire() as conn:
            n = await time_out_recordings(conn, older_than=self.options.timeout, limit=self._batch)
        self._counted_outcomes(run, timeout=n)
        return n >= self._batch

    async def _ask_batch(self, run: JobRun, client: RecordingStatusClient) -> bool:
        backoff = self.options.backoff
        async with self._pool.acquire() as conn:
            claimed = await conn.fetch(
                QUERIES["claim_finalize"],
                self._batch,
                backoff.base,
                backoff.factor,
                backoff.cap,
                JITTER,
            )
        if not claimed:
            return False

        in_flight = asyncio.Semaphore(MAX_CONNECTIONS)

        async def ask(recording_id: UUID) -> Answer | None:
            async with in_flight:
                if run.stopping():
                    return None  # not asked: due again after the claim's backoff
                return await client.ask(recording_id)

        answers = await asyncio.gather(*(ask(r["id"]) for r in claimed))
        available: list[UUID] = []
        failed: list[tuple[UUID, str]] = []
        timed_out: set[UUID] = set()
        causes: Counter[str] = Counter()
        for r, answer in zip(claimed, answers, strict=True):
            if answer is None:
                continue
            self.metrics.finalize_retried.labels(answer.result.value).inc()
            run.add(f"answered_{answer.result.value}")
            if answer.result is AskResult.UNREACHABLE:
                causes[answer.code or "Unknown"] += 1
            decision = decide(
                answer, attempts=r["finalize_attempts"], max_attempts=self.options.max_attempts
            )
            if decision.verdict is Verdict.AVAILABLE:
                available.append(r["id"])
            elif decision.verdict is Verdict.FAILED:
                failed.append((r["id"], decision.code or FINALIZE_TIMEOUT_CODE))
                if answer.result is not AskResult.FAILED:
                    timed_out.add(r["id"])
        if causes:
            _log.warning("recording_status_unreachable", causes=dict(causes))
        # A run cancelled here (its lease expired) loses these answers, as a crash would: the
        # recordings are asked again after their backoff.
        async with self._pool.acquire() as conn:
            made_available, made_failed = await settle_recordings(
                conn, available=available, failed=failed
            )
        for recording_id in made_available:
            _log.info("recording_finalized", recording_id=str(recording_id), outcome="available")
        codes = dict(failed)
        for recording_id in made_failed:
            _log.info(
                "recording_finalized",
                recording_id=str(recording_id),
                outcome="timeout" if recording_id in timed_out else "failed",
                code=codes[recording_id],
            )
        timeouts = sum(1 for i in made_failed if i in timed_out)
        self._counted_outcomes(
            run, available=len(made_available), failed=len(made_failed) - timeouts, timeout=timeouts
        )
        return len(claimed) >= self._batch

    def _counted_outcomes(self, run: JobRun, **outcomes: int) -> None:
        for outcome, n in outcomes.items():
            if n:
                self.metrics.finalized.labels(outcome).inc(n)
                run.add(f"finalized_{outcome}", n)
