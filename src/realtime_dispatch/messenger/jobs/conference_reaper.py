"""The conference-room reaper (the spec's ConferenceRoomReaperJob): a live conference with
nobody in its room for ``empty_timeout`` seconds, or started more than ``max_duration``
seconds ago, is ended by the system: ``Ended`` with ``ended_by_user_id`` null, its open roster
entries closed, and ``ConferenceEnded`` to ``chat:{chatId}`` through an outbox row in the same
transaction.

"Nobody in the room": no roster entry is ``Joined``; the room has been empty since the last
``left_at`` (or the start, if nobody ever left). A conference someone rejoined is not empty.
Each batch is one transaction: the stale conferences are locked (``FOR UPDATE SKIP LOCKED``),
then checked again under the lock, so a join that committed meanwhile keeps its conference.
"""

from __future__ import annotations

import time
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.conferences import close_ended
from realtime_dispatch.messenger.jobs.metrics import CONFERENCE_REAPER
from realtime_dispatch.messenger.jobs.options import ConferenceReaperOptions
from realtime_dispatch.messenger.jobs.scheduled import QUERIES, BatchJob, JobRun


async def reap_stale_conferences(
    conn: DbConnection, options: ConferenceReaperOptions, *, limit: int
) -> tuple[list[UUID], list[UUID], int]:
    """One batch in one transaction: ``(ended empty, ended overlong, locked)`` — ``locked``
    is how many were taken (a full batch means more may be waiting)."""
    empty, overlong = float(options.empty_timeout), float(options.max_duration)
    async with conn.transaction():
        locked = await conn.fetch(QUERIES["lock_stale_conferences"], empty, overlong, limit)
        if not locked:
            return [], [], 0
        rows = await conn.fetch(
            QUERIES["end_stale_conferences"], empty, overlong, [r["id"] for r in locked]
        )
        await close_ended(conn, [(r["id"], r["chat_id"]) for r in rows])
    return (
        [r["id"] for r in rows if not r["overlong"]],
        [r["id"] for r in rows if r["overlong"]],
        len(locked),
    )


class ConferenceRoomReaper(BatchJob[ConferenceReaperOptions]):
    """The job's work: batches of ``batch_size`` until none is full, the run's time is up or a
    stop is asked (checked between batches; a batch is one short transaction)."""

    name = CONFERENCE_REAPER

    async def run_once(self, run: JobRun) -> None:
        while not run.out_of_time():
            started = time.monotonic()
            async with self._pool.acquire() as conn:
                empty, overlong, locked = await reap_stale_conferences(
                    conn, self.options, limit=self._batch
                )
            run.add("ended_empty", len(empty))
            run.add("ended_overlong", len(overlong))
            self.metrics.reaped.labels("empty").inc(len(empty))
            self.metrics.reaped.labels("overlong").inc(len(overlong))
            if locked < self._batch:
                return
            await run.rest(started)
