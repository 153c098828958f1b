"""The media lifecycle jobs against a real PostgreSQL and a real status service on loopback:
the conference-room reaper (empty, rejoined, overlong conferences) and the recording-finalize
retry (ready, failed, processing then ready, unreachable, timed out, a callback racing an ask),
each under its own single-runner lock, with two replicas at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID, uuid4

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from realtime_dispatch.messenger import chats, conferences
from realtime_dispatch.messenger.jobs.conference_reaper import (
    ConferenceRoomReaper,
    reap_stale_conferences,
)
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
)
from realtime_dispatch.messenger.jobs.scheduled import JobRun, JobWork, ScheduledJob
from realtime_dispatch.messenger.refusals import Conflict
from realtime_dispatch.outbox.backoff import Backoff
from tests.integration.support import make_stack

REAPER = ConferenceReaperOptions(empty_timeout=300, max_duration=8 * 3600)
SCHEDULE = JobSchedule(interval=0.05, lock_ttl=10, max_run_duration=5, batch_size=200)
FAST_BACKOFF = Backoff(base=0.2, factor=2.0, cap=1.0)


@dataclass
class Jobs:
    metrics: MediaJobMetrics

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def scheduled(
    database_url: str, work: JobWork, metrics: MediaJobMetrics
) -> AsyncIterator[ScheduledJob]:
    job = ScheduledJob(
        work,
        connect=lambda: asyncpg.connect(database_url),
        schedule=SCHEDULE,
        metrics=metrics,
    )
    try:
        yield job
    finally:
        await job.aclose()


async def ended_pushes(pool: asyncpg.Pool, kind: str) -> list[asyncpg.Record]:
    return list(
        await pool.fetch(
            "SELECT ref_id, chat_id, target_user_id FROM messenger.realtime_outbox"
            " WHERE kind = $1 ORDER BY id",
            kind,
        )
    )


async def new_conference(pool: asyncpg.Pool, *others: UUID) -> tuple[UUID, UUID, UUID]:
    """A chat whose starter runs a conference; returns (chat, conference, starter)."""
    starter = uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=starter, title="t", members=list(others))
        conference = await conferences.start_conference(conn, chat_id=chat, actor=starter)
    return chat, conference, starter


async def age_roster(pool: asyncpg.Pool, conference: UUID, seconds: float) -> None:
    """Every roster entry that left, left ``seconds`` ago; the conference started before."""
    await pool.execute(
        "UPDATE messenger.conference_participants SET left_at = now() - make_interval(secs => $2)"
        " WHERE conference_id = $1 AND left_at IS NOT NULL",
        conference,
        float(seconds),
    )
    await pool.execute(
        "UPDATE messenger.conference_sessions"
        " SET started_at = now() - make_interval(secs => $2 + 60) WHERE id = $1",
        conference,
        float(seconds),
    )


async def status_of(pool: asyncpg.Pool, table: str, entity: UUID) -> str:
    return str(await pool.fetchval(f"SELECT status FROM messenger.{table} WHERE id = $1", entity))


# --- the conference-room reaper -----------------------------------------------------------


async def test_an_empty_conference_is_ended_by_nobody_with_one_push_to_its_chat(
    pool: asyncpg.Pool, database_url: str
) -> None:
    chat, empty, starter = await new_conference(pool)
    _, recent, recent_starter = await new_conference(pool)
    async with pool.acquire() as conn:
        await conferences.leave_conference(conn, conference_id=empty, actor=starter)
        await conferences.leave_conference(conn, conference_id=recent, actor=recent_starter)
    await age_roster(pool, empty, 301)
    await age_roster(pool, recent, 200)  # empty, but not for long enough
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    metrics = MediaJobMetrics(CollectorRegistry())
    async with scheduled(database_url, ConferenceRoomReaper(pool, REAPER, metrics), metrics) as job:
        run = await job.turn()
        assert run is not None
        assert run.counts == {"ended_empty": 1, "ended_overlong": 0}
        row = await pool.fetchrow(
            "SELECT status, ended_by_user_id, ended_at FROM messenger.conference_sessions"
            " WHERE id = $1",
            empty,
        )
        assert (row["status"], row["ended_by_user_id"]) == ("Ended", None)
        assert row["ended_at"] is not None
        assert await status_of(pool, "conference_sessions", recent) == "Active"
        pushes = await ended_pushes(pool, "ConferenceEnded")
        assert [(p["ref_id"], p["chat_id"]) for p in pushes] == [(empty, chat)]
        assert (
            Jobs(metrics).sample("messenger_realtime_conference_reaped_total", reason="empty") == 1
        )
        ran = Jobs(metrics).sample(
            "messenger_realtime_job_runs_total", job="conference-room-reaper", result="ran"
        )
        assert ran == 1
        assert Jobs(metrics).sample(
            "messenger_realtime_job_last_run_timestamp_seconds", job="conference-room-reaper"
        )
        # The push is delivered to the chat: ended, by nobody.
        stack = make_stack(pool)
        assert (await stack.dispatcher.run_pass()).dispatched == 1
        [push] = stack.publisher.pushes
        assert (push.group, push.target) == (f"chat:{chat}", "conference_ended")
        assert "endedByUserId" not in push.payload
        # A chat's one live conference slot is free again, and the ended one stays ended.
        async with pool.acquire() as conn:
            await conferences.start_conference(conn, chat_id=chat, actor=starter)
            with pytest.raises(Conflict):
                await conferences.join_conference(conn, conference_id=empty, actor=starter)
        assert (await job.turn()) is not None
        assert len(await ended_pushes(pool, "ConferenceEnded")) == 1  # nothing twice


async def test_a_conference_someone_rejoined_is_left_alone(pool: asyncpg.Pool) -> None:
    bob = uuid4()
    _, conference, alice = await new_conference(pool, bob)
    async with pool.acquire() as conn:
        await conferences.join_conference(conn, conference_id=conference, actor=bob)
        await conferences.leave_conference(conn, conference_id=conference, actor=alice)
        await conferences.leave_conference(conn, conference_id=conference, actor=bob)
        await age_roster(pool, conference, 400)
        await conferences.join_conference(conn, conference_id=conference, actor=bob)  # back
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([], [], 0)
        # Bob leaves again: the room is empty from now, so it waits out the timeout anew.
        await conferences.leave_conference(conn, conference_id=conference, actor=bob)
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([], [], 0)
        assert await status_of(pool, "conference_sessions", conference) == "Active"
        await age_roster(pool, conference, 301)
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([conference], [], 1)


async def test_a_conference_nobody_ever_left_is_empty_only_when_nobody_is_joined(
    pool: asyncpg.Pool,
) -> None:
    """Invited-only rosters count as empty from the start; a starter still in does not."""
    bob = uuid4()
    _, conference, alice = await new_conference(pool, bob)
    async with pool.acquire() as conn:
        await conferences.invite_to_conference(
            conn, conference_id=conference, actor=alice, user_id=bob
        )
        await age_roster(pool, conference, 400)
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([], [], 0)  # alice is in
        await conn.execute(
            "UPDATE messenger.conference_participants SET status = 'Invited', joined_at = NULL"
            " WHERE conference_id = $1",
            conference,
        )
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([conference], [], 1)


async def test_an_overlong_conference_is_ended_and_its_open_roster_closed(
    pool: asyncpg.Pool,
) -> None:
    bob, carol = uuid4(), uuid4()
    chat, conference, alice = await new_conference(pool, bob, carol)
    _, young, _ = await new_conference(pool)
    async with pool.acquire() as conn:
        await conferences.join_conference(conn, conference_id=conference, actor=bob)
        await conferences.invite_to_conference(
            conn, conference_id=conference, actor=alice, user_id=carol
        )
        await conn.execute(
            "UPDATE messenger.conference_sessions"
            " SET started_at = now() - interval '8 hours 1 minute'"
            " WHERE id = $1",
            conference,
        )
        await conn.execute(
            "UPDATE messenger.conference_sessions SET started_at = now() - interval '7 hours'"
            " WHERE id = $1",
            young,
        )
        assert await reap_stale_conferences(conn, REAPER, limit=10) == ([], [conference], 1)
    roster = dict(
        await pool.fetch(
            "SELECT user_id, status FROM messenger.conference_participants"
            " WHERE conference_id = $1",
            conference,
        )
    )
    assert roster == {alice: "Left", bob: "Left", carol: "Invited"}
    left_at = await pool.fetch(
        "SELECT left_at FROM messenger.conference_participants"
        " WHERE conference_id = $1 AND status = 'Left'",
        conference,
    )
    assert all(r["left_at"] is not None for r in left_at)
    assert await status_of(pool, "conference_sessions", young) == "Active"
    ended = await ended_pushes(pool, "ConferenceEnded")
    assert [(p["ref_id"], p["chat_id"]) for p in ended] == [(conference, chat)]
    # The reaper's end writes no ConferenceParticipantLeft rows: one push, ended.
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox"
            " WHERE kind = 'ConferenceParticipantLeft'"
        )
        == 0
    )


async def test_a_join_that_holds_the_conference_keeps_it(pool: asyncpg.Pool) -> None:
    """A join in flight holds the conference's row: the reaper skips it (SKIP LOCKED), and once
    the join commits the conference is no longer empty."""
    bob = uuid4()
    _, conference, alice = await new_conference(pool, bob)
    async with pool.acquire() as conn:
        await conferences.leave_conference(conn, conference_id=conference, actor=alice)
    await age_roster(pool, conference, 400)
    async with pool.acquire() as joiner, pool.acquire() as reaper:
        async with joiner.transaction():
            await joiner.execute(
                "SELECT 1 FROM messenger.conference_sessions WHERE id = $1 FOR UPDATE", conference
            )
            assert await reap_stale_conferences(reaper, REAPER, limit=10) == ([], [], 0)
            await joiner.execute(
                "UPDATE messenger.conference_participants SET status = 'Joined',"
                " joined_at = now(), left_at = NULL WHERE conference_id = $1",
                conference,
            )
        assert await reap_stale_conferences(reaper, REAPER, limit=10) == ([], [], 0)
    assert await status_of(pool, "conference_sessions", conference) == "Active"


async def test_two_replicas_end_each_conference_once(pool: asyncpg.Pool, database_url: str) -> None:
    ids = []
    for _ in range(30):
        _, conference, starter = await new_conference(pool)
        async with pool.acquire() as conn:
            await conferences.leave_conference(conn, conference_id=conference, actor=starter)
        ids.append(conference)
    await pool.execute(
        "UPDATE messenger.conference_participants SET left_at = now() - interval '10 minutes'"
    )
    # Past the lock (its defence in depth): two sweeps at once, small batches, SKIP LOCKED.
    wide = await asyncpg.create_pool(database_url, min_size=2, max_size=2)
    assert wide is not None
    try:

        async def sweep() -> list[UUID]:
            ended: list[UUID] = []
            async with wide.acquire() as conn:
                while True:
                    empty, _, locked = await reap_stale_conferences(conn, REAPER, limit=3)
                    ended += empty
                    if locked == 0:
                        return ended

        first, second = await asyncio.gather(sweep(), sweep())
    finally:
        await wide.close()
    assert sorted(first + second) == sorted(ids)
    assert not set(first) & set(second)
    pushes = await ended_pushes(pool, "ConferenceEnded")
    assert sorted(p["ref_id"] for p in pushes) == sorted(ids)


async def test_the_single_runner_lock_lets_one_replica_run(
    pool: asyncpg.Pool, database_url: str
) -> None:
    metrics = MediaJobMetrics(CollectorRegistry())
    work = ConferenceRoomReaper(pool, REAPER, metrics)
    holder = await asyncpg.connect(database_url)
    try:
        key = "job:scheduled:messenger-conference-room-reaper"
        assert await holder.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key)
        async with scheduled(database_url, work, metrics) as job:
            assert await job.turn() is None  # an operator holding the key pauses the job
            skipped = Jobs(metrics).sample(
                "messenger_realtime_job_runs_total",
                job="conference-room-reaper",
                result="skipped_locked",
            )
            assert skipped == 1
            await holder.execute("SELECT pg_advisory_unlock_all()")
            assert await job.turn() is not None
    finally:
        await holder.close()


class StopAfterFirstBatch(JobRun):
    """A run whose stop is asked as soon as its first batch is counted (as a SIGTERM landing
    then would)."""

    def add(self, name: str, n: int = 1) -> None:
        super().add(name, n)
        self.stop.set()


async def test_a_stop_ends_the_run_before_the_next_batch(pool: asyncpg.Pool) -> None:
    for _ in range(3):
        _, conference, starter = await new_conference(pool)
        async with pool.acquire() as conn:
            await conferences.leave_conference(conn, conference_id=conference, actor=starter)
        await age_roster(pool, conference, 400)
    metrics = MediaJobMetrics(CollectorRegistry())
    work = ConferenceRoomReaper(pool, REAPER, metrics, batch_size=1)
    run = StopAfterFirstBatch(deadline=time.monotonic() + 60, stop=asyncio.Event())
    await work.run_once(run)
    assert run.counts["ended_empty"] == 1  # the committed batch stays; the rest wait
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM messenger.conference_sessions WHERE status = 'Ended'"
        )
        == 1
    )
    await work.run_once(JobRun(deadline=time.monotonic() + 60, stop=asyncio.Event()))
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM messenger.conference_sessions WHERE status = 'Ended'"
        )
        == 3
    )
