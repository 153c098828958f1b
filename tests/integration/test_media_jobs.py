"""The media lifecycle jobs against a real PostgreSQL and a real status service on loopback:
the conference-room reaper (empty, rejoined, overlong conferences) and the recording-finalize
retry (ready, failed, processing then ready, unreachable, timed out, a callback racing an ask),
each under its own single-runner lock, with two replicas at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from uuid import UUID, uuid4

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from realtime_dispatch.messenger import chats, conferences, recordings
from realtime_dispatch.messenger.jobs.conference_reaper import (
    ConferenceRoomReaper,
    reap_stale_conferences,
)
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
)
from realtime_dispatch.messenger.jobs.recording_finalize import RecordingFinalizeRetry
from realtime_dispatch.messenger.jobs.scheduled import JobRun, JobWork, ScheduledJob
from realtime_dispatch.messenger.jobs.status_client import RecordingStatusClient
from realtime_dispatch.messenger.refusals import Conflict
from realtime_dispatch.outbox.backoff import Backoff
from support.procs import free_port, wait_until
from tests.integration.status_service import StatusService, status_service, stopped_call_recording
from tests.integration.support import make_stack

REAPER = ConferenceReaperOptions(empty_timeout=300, max_duration=8 * 3600)
SCHEDULE = JobSchedule(interval=0.05, lock_ttl=10, max_run_duration=5, batch_size=200, pause=0)
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


async def emptied_long_ago(pool: asyncpg.Pool, count: int) -> None:
    """``count`` conferences whose one participant, the starter, left 400 s ago."""
    for _ in range(count):
        _, conference, starter = await new_conference(pool)
        async with pool.acquire() as conn:
            await conferences.leave_conference(conn, conference_id=conference, actor=starter)
        await age_roster(pool, conference, 400)


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


@dataclass
class RecordedRests(JobRun):
    """A run that notes each rest the work takes (and takes it)."""

    rests: list[int] = field(default_factory=list)

    async def rest(self, batch_started: float) -> None:
        self.rests.append(sum(self.counts.values()))
        await super().rest(batch_started)


async def test_a_backlog_is_swept_with_a_rest_after_each_full_batch(pool: asyncpg.Pool) -> None:
    await emptied_long_ago(pool, 3)
    metrics = MediaJobMetrics(CollectorRegistry())
    work = ConferenceRoomReaper(pool, REAPER, metrics, batch_size=2)
    run = RecordedRests(deadline=time.monotonic() + 60, stop=asyncio.Event(), pause=1.0)
    await work.run_once(run)
    # The full first batch is followed by a rest; the second, short of a batch, ends the run.
    assert run.rests == [2]
    assert run.counts["ended_empty"] == 3


async def test_the_schedule_paces_each_run(pool: asyncpg.Pool, database_url: str) -> None:
    metrics = MediaJobMetrics(CollectorRegistry())
    work = ConferenceRoomReaper(pool, REAPER, metrics)
    job = ScheduledJob(
        work,
        connect=lambda: asyncpg.connect(database_url),
        schedule=JobSchedule(interval=0.05, lock_ttl=10, max_run_duration=5, pause=2.5),
        metrics=metrics,
    )
    try:
        run = await job.turn()
    finally:
        await job.aclose()
    assert run is not None
    assert run.pause == 2.5


class StopAfterFirstBatch(JobRun):
    """A run whose stop is asked as soon as its first batch is counted (as a SIGTERM landing
    then would)."""

    def add(self, name: str, n: int = 1) -> None:
        super().add(name, n)
        self.stop.set()


async def test_a_stop_ends_the_run_before_the_next_batch(pool: asyncpg.Pool) -> None:
    await emptied_long_ago(pool, 3)
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


# --- the recording-finalize retry ---------------------------------------------------------


async def stopped_conference_recording(pool: asyncpg.Pool) -> tuple[UUID, UUID]:
    """A stopped recording of a live conference; returns (recording, chat)."""
    chat, conference, starter = await new_conference(pool)
    async with pool.acquire() as conn:
        recording = await recordings.start_recording(conn, actor=starter, conference_id=conference)
        await recordings.stop_recording(conn, recording_id=recording, actor=starter)
    return recording, chat


def finalize_options(url: str | None, **changes: object) -> RecordingFinalizeOptions:
    values: dict[str, object] = {"status_url": url, "max_attempts": 8, "backoff": FAST_BACKOFF}
    values.update(changes)
    return RecordingFinalizeOptions(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def finalize_job(
    pool: asyncpg.Pool, database_url: str, options: RecordingFinalizeOptions
) -> AsyncIterator[tuple[ScheduledJob, Jobs]]:
    metrics = MediaJobMetrics(CollectorRegistry())
    async with contextlib.AsyncExitStack() as stack:
        client = None
        if options.status_url is not None:
            client = await stack.enter_async_context(RecordingStatusClient(options.status_url))
        work = RecordingFinalizeRetry(pool, options, metrics, client=client)
        job = await stack.enter_async_context(scheduled(database_url, work, metrics))
        yield job, Jobs(metrics)


async def recording(pool: asyncpg.Pool, recording_id: UUID) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT status, failure_code, finalize_attempts, available_at, failed_at,"
        " extract(epoch FROM finalize_next_at)::float8 AS next_at"
        " FROM messenger.call_recordings WHERE id = $1",
        recording_id,
    )
    assert row is not None
    return row


async def db_clock(pool: asyncpg.Pool) -> float:
    return float(await pool.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8"))


async def make_due(pool: asyncpg.Pool) -> None:
    await pool.execute(
        "UPDATE messenger.call_recordings SET finalize_next_at = now() WHERE status = 'Stopped'"
    )


async def outcome_pushes(pool: asyncpg.Pool) -> list[tuple[str, UUID | None, UUID | None]]:
    rows = await pool.fetch(
        "SELECT kind, ref_id, coalesce(target_user_id, chat_id) AS target"
        " FROM messenger.realtime_outbox"
        " WHERE kind IN ('RecordingAvailable', 'RecordingFailed') ORDER BY id"
    )
    return [(r["kind"], r["ref_id"], r["target"]) for r in rows]


async def test_ready_makes_the_recording_available_with_a_push_to_its_audience(
    pool: asyncpg.Pool, database_url: str
) -> None:
    call_recording, caller, callee = await stopped_call_recording(pool)
    conference_recording, chat = await stopped_conference_recording(pool)
    service = StatusService()
    service.answer(call_recording, {"status": "ready"})
    service.answer(conference_recording, {"status": "ready"})
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (job, jobs),
    ):
        run = await job.turn()
        assert run is not None
        assert run.counts == {"answered_ready": 2, "finalized_available": 2}
        assert (await job.turn()) is not None  # nothing left to ask
    assert service.asked == {call_recording: 1, conference_recording: 1}
    for recording_id in (call_recording, conference_recording):
        row = await recording(pool, recording_id)
        assert (row["status"], row["finalize_attempts"]) == ("Available", 1)
        assert row["available_at"] is not None
    assert sorted(await outcome_pushes(pool), key=str) == sorted(
        [
            ("RecordingAvailable", call_recording, callee),
            ("RecordingAvailable", call_recording, caller),
            ("RecordingAvailable", conference_recording, chat),
        ],
        key=str,
    )
    assert jobs.sample("messenger_realtime_recording_finalize_retried_total", result="ready") == 2
    assert jobs.sample("messenger_realtime_recording_finalized_total", outcome="available") == 2
    # Delivered like the callback's: recording_available to the parties and the chat.
    stack = make_stack(pool)
    assert (await stack.dispatcher.run_pass()).dispatched == 3
    assert {p.target for p in stack.publisher.pushes} == {"recording_available"}
    assert {p.group for p in stack.publisher.pushes} == {
        f"user:{caller}",
        f"user:{callee}",
        f"chat:{chat}",
    }


async def test_failed_gives_recording_failed_with_its_code(
    pool: asyncpg.Pool, database_url: str
) -> None:
    recording_id, caller, callee = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(recording_id, {"status": "failed", "code": "TranscodeFailed"})
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (job, jobs),
    ):
        await job.turn()
    row = await recording(pool, recording_id)
    assert (row["status"], row["failure_code"]) == ("Failed", "TranscodeFailed")
    assert sorted(await outcome_pushes(pool), key=str) == sorted(
        [("RecordingFailed", recording_id, caller), ("RecordingFailed", recording_id, callee)],
        key=str,
    )
    assert jobs.sample("messenger_realtime_recording_finalized_total", outcome="failed") == 1
    stack = make_stack(pool)
    await stack.dispatcher.run_pass()
    failed = [p for p in stack.publisher.pushes if p.target == "recording_failed"]
    assert len(failed) == 2
    assert {p.payload["failureCode"] for p in failed} == {"TranscodeFailed"}


async def test_processing_then_ready_waits_out_the_backoff(
    pool: asyncpg.Pool, database_url: str
) -> None:
    recording_id, _, _ = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(
        recording_id, {"status": "processing"}, {"status": "processing"}, {"status": "ready"}
    )
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (job, jobs),
    ):
        before = await db_clock(pool)
        await job.turn()
        after = await db_clock(pool)
        row = await recording(pool, recording_id)
        assert (row["status"], row["finalize_attempts"]) == ("Stopped", 1)
        # The dispatcher's backoff: base 0.2 s after the first ask, less up to 20 % jitter; the
        # claim ran between ``before`` and ``after`` (however slow the machine is).
        assert row["next_at"] - after <= 0.2
        assert row["next_at"] - before >= 0.16
        await job.turn()  # not due yet: not asked
        assert service.asked[recording_id] == 1
        await make_due(pool)
        before = await db_clock(pool)
        await job.turn()
        after = await db_clock(pool)
        row = await recording(pool, recording_id)
        assert (row["status"], row["finalize_attempts"]) == ("Stopped", 2)
        assert row["next_at"] - after <= 0.4  # base * factor
        assert row["next_at"] - before >= 0.32
        await make_due(pool)
        await job.turn()
    row = await recording(pool, recording_id)
    assert (row["status"], row["finalize_attempts"]) == ("Available", 3)
    assert service.asked[recording_id] == 3
    assert [k for k, _, _ in await outcome_pushes(pool)] == ["RecordingAvailable"] * 2
    assert (
        jobs.sample("messenger_realtime_recording_finalize_retried_total", result="processing") == 2
    )


async def test_an_unreachable_status_service_ends_in_finalize_timeout(
    pool: asyncpg.Pool, database_url: str
) -> None:
    recording_id, _, _ = await stopped_call_recording(pool)
    url = f"http://127.0.0.1:{free_port()}/status"  # nothing listens there
    async with finalize_job(pool, database_url, finalize_options(url, max_attempts=3)) as (
        job,
        jobs,
    ):
        for attempt in (1, 2):
            await job.turn()
            row = await recording(pool, recording_id)
            assert (row["status"], row["finalize_attempts"]) == ("Stopped", attempt)
            await make_due(pool)
        await job.turn()
    row = await recording(pool, recording_id)
    assert (row["status"], row["failure_code"], row["finalize_attempts"]) == (
        "Failed",
        "FinalizeTimeout",
        3,
    )
    assert [k for k, _, _ in await outcome_pushes(pool)] == ["RecordingFailed"] * 2
    assert (
        jobs.sample("messenger_realtime_recording_finalize_retried_total", result="unreachable")
        == 3
    )
    assert jobs.sample("messenger_realtime_recording_finalized_total", outcome="timeout") == 1


async def test_without_a_status_service_a_recording_times_out_after_the_timeout(
    pool: asyncpg.Pool, database_url: str
) -> None:
    old, caller, callee = await stopped_call_recording(pool)
    fresh, _ = await stopped_conference_recording(pool)
    await pool.execute(
        "UPDATE messenger.call_recordings SET stopped_at = now() - interval '601 seconds'"
        " WHERE id = $1",
        old,
    )
    async with finalize_job(pool, database_url, finalize_options(None, timeout=600)) as (job, jobs):
        run = await job.turn()
        assert run is not None
        assert run.counts == {"finalized_timeout": 1}
        await job.turn()
    assert (await recording(pool, old))["failure_code"] == "FinalizeTimeout"
    assert (await recording(pool, fresh))["status"] == "Stopped"
    assert sorted(await outcome_pushes(pool), key=str) == sorted(
        [("RecordingFailed", old, caller), ("RecordingFailed", old, callee)], key=str
    )
    assert jobs.sample("messenger_realtime_recording_finalized_total", outcome="timeout") == 1


async def test_a_callback_racing_an_ask_wins_once(pool: asyncpg.Pool, database_url: str) -> None:
    """The pipeline's callback lands while the job's ask is in flight: the callback's outcome
    stands, the job's answer changes nothing, and there is one push per party."""
    recording_id, caller, _ = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(recording_id, {"status": "failed", "code": "Late"})
    service.hold = True
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (job, jobs),
    ):
        turn = asyncio.create_task(job.turn())
        await wait_until(lambda: service.held == 1)  # the ask is in flight
        async with pool.acquire() as conn:
            await recordings.mark_recording_available(conn, recording_id=recording_id, actor=caller)
        service.released.set()
        run = await turn
        assert run is not None
        assert run.counts == {"answered_failed": 1}  # answered, but nothing was settled
        # And the other way round: a callback after the job settled it is refused.
        async with pool.acquire() as conn:
            with pytest.raises(Conflict):
                await recordings.mark_recording_failed(
                    conn, recording_id=recording_id, actor=caller, code="X"
                )
    row = await recording(pool, recording_id)
    assert (row["status"], row["failure_code"]) == ("Available", None)
    assert [k for k, _, _ in await outcome_pushes(pool)] == ["RecordingAvailable"] * 2
    assert jobs.sample("messenger_realtime_recording_finalized_total", outcome="failed") == 0


async def test_a_callback_holding_the_row_makes_the_job_wait_then_change_nothing(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """The callback's transaction holds the recording while the job writes its outcome: the
    job's write waits for it, then finds the recording settled."""
    recording_id, _, _ = await stopped_call_recording(pool)
    service = StatusService()
    service.answer(recording_id, {"status": "ready"})
    service.hold = True
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (job, _),
        pool.acquire() as conn,
    ):
        turn = asyncio.create_task(job.turn())
        await wait_until(lambda: service.held == 1)  # claimed and asked
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            "SELECT 1 FROM messenger.call_recordings WHERE id = $1 FOR UPDATE", recording_id
        )
        service.released.set()
        await wait_until(
            lambda: pool.fetchval(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            )
        )
        await conn.execute(
            "UPDATE messenger.call_recordings SET status = 'Failed', failed_at = now(),"
            " failure_code = 'FromCallback' WHERE id = $1",
            recording_id,
        )
        await tx.commit()
        run = await turn
    assert run is not None
    assert "finalized_available" not in run.counts
    assert (await recording(pool, recording_id))["failure_code"] == "FromCallback"
    assert await outcome_pushes(pool) == []  # the hand-made "callback" wrote none here


async def test_two_replicas_settle_each_recording_once(
    pool: asyncpg.Pool, database_url: str
) -> None:
    ids = [(await stopped_call_recording(pool))[0] for _ in range(20)]
    service = StatusService()
    for recording_id in ids:
        service.answer(recording_id, {"status": "ready"})
    async with (
        status_service(service) as url,
        finalize_job(pool, database_url, finalize_options(url)) as (first, _),
        finalize_job(pool, database_url, finalize_options(url)) as (second, _),
    ):
        # Through the lock: one replica runs, the other skips.
        service.hold = True
        runs = asyncio.gather(first.turn(), second.turn())
        await wait_until(lambda: service.held >= 1)
        service.released.set()
        results = await runs
        assert sorted(r is None for r in results) == [False, True]
        # Past the lock (its defence in depth): both works at once, batches of 3.
        service.hold = False
        more = [(await stopped_call_recording(pool))[0] for _ in range(20)]
        for recording_id in more:
            service.answer(recording_id, {"status": "ready"})
        works = [first.work, second.work]
        for work in works:
            assert isinstance(work, RecordingFinalizeRetry)
            work._batch = 3
        await asyncio.gather(
            *(
                w.run_once(JobRun(deadline=time.monotonic() + 30, stop=asyncio.Event()))
                for w in works
            )
        )
    assert set(service.asked) == set(ids + more)
    assert set(service.asked.values()) == {1}  # each recording asked once
    pushes = await outcome_pushes(pool)
    assert len(pushes) == 2 * 40  # one per party, each recording once
    assert {ref for _, ref, _ in pushes} == set(ids + more)


async def test_a_stop_leaves_the_unasked_recordings_for_later(
    pool: asyncpg.Pool, database_url: str
) -> None:
    ids = [(await stopped_call_recording(pool))[0] for _ in range(40)]
    service = StatusService()
    for recording_id in ids:
        service.answer(recording_id, {"status": "ready"})
    service.hold = True
    metrics = MediaJobMetrics(CollectorRegistry())
    async with status_service(service) as url, RecordingStatusClient(url) as client:
        work = RecordingFinalizeRetry(pool, finalize_options(url), metrics, client=client)
        run = JobRun(deadline=time.monotonic() + 30, stop=asyncio.Event())
        task = asyncio.create_task(work.run_once(run))
        await wait_until(lambda: service.held == 16)  # the client's connections, all in flight
        run.stop.set()
        service.released.set()
        await task
    assert sum(service.asked.values()) == 16
    statuses = dict(
        await pool.fetch("SELECT status, count(*) FROM messenger.call_recordings GROUP BY 1")
    )
    assert statuses == {"Available": 16, "Stopped": 24}
