"""The owner service's rules against a real PostgreSQL: gap-free seqs under concurrent senders,
the edit window and sender checks, the blacklist, record-level access, the call-timeout reaper,
and the builders' refusal to send an entity to a group that may not see it."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import orjson
import pytest
from prometheus_client import CollectorRegistry

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger import (
    blacklist,
    calls,
    chats,
    conferences,
    contacts,
    media_join,
    messages,
    reads,
    recordings,
    screenshare,
)
from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions, CallTimeoutReaper
from realtime_dispatch.messenger.jobs.metrics import MediaJobMetrics
from realtime_dispatch.messenger.jobs.options import JobSchedule
from realtime_dispatch.messenger.jobs.scheduled import JobRun, ScheduledJob
from realtime_dispatch.messenger.reaper import (
    reap_overlong_calls,
    reap_unanswered_calls,
)
from realtime_dispatch.messenger.refusals import Conflict, Forbidden, InvalidInput, NotFound
from realtime_dispatch.outbox.model import ClaimedRow
from tests.integration.messenger_scenario import domain_snapshot
from tests.integration.messenger_world import MEDIA
from tests.integration.support import make_stack, table_texts


async def outbox_count(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox"))


async def test_twenty_concurrent_senders_get_gap_free_seqs(database_url: str) -> None:
    senders = [uuid4() for _ in range(20)]
    wide = await asyncpg.create_pool(database_url, min_size=20, max_size=20)
    assert wide is not None
    try:
        async with wide.acquire() as conn:
            chat = await chats.create_chat(conn, creator=senders[0], title="t", members=senders)
        start = asyncio.Event()

        async def sender(user: UUID) -> list[int]:
            seqs = []
            async with wide.acquire() as conn:
                await start.wait()
                for n in range(3):
                    sent = await messages.send_message(conn, chat_id=chat, sender=user, body=f"{n}")
                    seqs.append(sent.seq)
            return seqs

        tasks = [asyncio.create_task(sender(u)) for u in senders]
        await asyncio.sleep(0.05)
        start.set()
        results = await asyncio.gather(*tasks)
        got = sorted(seq for seqs in results for seq in seqs)
        assert got == list(range(1, 61))
        for seqs in results:
            assert seqs == sorted(seqs)  # one sender's messages keep their order
        stored = await wide.fetch("SELECT seq FROM messenger.messages WHERE chat_id = $1", chat)
        assert sorted(r["seq"] for r in stored) == got
        # The chat's creation (its chat_updated, no seq) aside, one row per message.
        messages_only = "FROM messenger.realtime_outbox WHERE kind = 'MessageReceived'"
        pushed = await wide.fetch(f"SELECT seq {messages_only} ORDER BY seq")
        assert [r["seq"] for r in pushed] == got
        # The dispatcher claims in id order: within a chat it must be seq order.
        claimed = await wide.fetch(f"SELECT seq {messages_only} ORDER BY id")
        assert [r["seq"] for r in claimed] == got
        assert await wide.fetchval("SELECT last_seq FROM messenger.chats WHERE id = $1", chat) == 60
    finally:
        await wide.close()


async def test_a_send_writes_the_message_its_seq_and_push_in_one_transaction(
    pool: asyncpg.Pool,
) -> None:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        sent = await messages.send_message(conn, chat_id=chat, sender=alice, body="hello")
        assert not conn.is_in_transaction()
    message = await pool.fetchrow(
        "SELECT chat_id, seq, sender_user_id, body, sent_at, xmin::text FROM messenger.messages"
        " WHERE id = $1",
        sent.message_id,
    )
    assert message is not None
    assert tuple(message)[:5] == (chat, 1, alice, "hello", sent.sent_at)
    push = await pool.fetchrow(
        "SELECT kind, target_kind, chat_id, target_user_id, message_id, ref_id, session_kind, seq,"
        " status, attempts, xmin::text FROM messenger.realtime_outbox WHERE id = $1",
        sent.outbox_id,
    )
    assert push is not None
    assert tuple(push)[:10] == (
        "MessageReceived", "ChatGroup", chat, None, sent.message_id, None, None, 1, "Pending", 0,
    )  # fmt: skip
    assert (sent.chat_id, sent.seq, sent.message_id.version, sent.outbox_id.version) == (
        chat, 1, 7, 7,
    )  # fmt: skip
    chat_row = await pool.fetchrow(
        "SELECT last_seq, xmin::text FROM messenger.chats WHERE id = $1", chat
    )
    assert chat_row is not None
    assert chat_row["last_seq"] == 1
    assert message["xmin"] == push["xmin"] == chat_row["xmin"]  # one writing transaction


async def test_a_refused_send_writes_nothing(pool: asyncpg.Pool) -> None:
    alice, bob, carol, dave = uuid4(), uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        direct = await chats.create_chat(conn, creator=alice, title="a+b", members=[bob])
        group = await chats.create_chat(conn, creator=alice, title="g", members=[bob, carol])
        await messages.send_message(conn, chat_id=group, sender=carol, body="bye")
        await chats.remove_participant(conn, chat_id=group, actor=alice, user_id=carol)
        await blacklist.block_user(conn, owner=bob, blocked=alice)
        state, rows = await domain_snapshot(pool), await outbox_count(pool)
        refusals: list[tuple[UUID, UUID, type[Exception], str]] = [
            (direct, alice, Forbidden, "the user has blocked you"),
            (group, carol, Forbidden, "not an active member"),  # left the chat
            (group, dave, Forbidden, "not a member"),
            (uuid4(), alice, NotFound, "chat not found"),
        ]
        for chat, sender, error, message in refusals:
            with pytest.raises(error) as refused:
                await messages.send_message(conn, chat_id=chat, sender=sender, body="no")
            assert str(refused.value) == message
            assert not conn.is_in_transaction()
        # No message, no push, and no seq taken: chats.last_seq is part of the snapshot.
        assert await domain_snapshot(pool) == state
        assert await outbox_count(pool) == rows
        assert (await messages.send_message(conn, chat_id=group, sender=bob, body="b")).seq == 2
        assert (await messages.send_message(conn, chat_id=direct, sender=bob, body="b")).seq == 1


async def test_a_send_joins_the_callers_transaction(pool: asyncpg.Pool) -> None:
    class Boom(Exception):
        pass

    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        state, rows = await domain_snapshot(pool), await outbox_count(pool)

        async def send_two_then_fail() -> None:
            async with conn.transaction():
                first = await messages.send_message(conn, chat_id=chat, sender=alice, body="1")
                second = await messages.send_message(conn, chat_id=chat, sender=bob, body="2")
                assert (first.seq, second.seq) == (1, 2)
                raise Boom

        with pytest.raises(Boom):
            await send_two_then_fail()
        assert await domain_snapshot(pool) == state  # the messages and both seqs rolled back
        assert await outbox_count(pool) == rows
        # A refused send leaves the caller's transaction usable; what it commits stays.
        async with conn.transaction():
            with pytest.raises(Forbidden, match="not a member"):
                await messages.send_message(conn, chat_id=chat, sender=uuid4(), body="no")
            sent = await messages.send_message(conn, chat_id=chat, sender=alice, body="yes")
            await conn.execute("UPDATE messenger.chats SET title = 'renamed' WHERE id = $1", chat)
        assert sent.seq == 1  # the rolled-back seqs were given back: still gap-free
        xmins = await pool.fetchval(
            "SELECT count(DISTINCT x) FROM (SELECT xmin::text AS x FROM messenger.chats"
            " WHERE id = $1 UNION ALL SELECT xmin::text FROM messenger.messages WHERE id = $2"
            " UNION ALL SELECT xmin::text FROM messenger.realtime_outbox WHERE id = $3) t",
            chat,
            sent.message_id,
            sent.outbox_id,
        )
        assert xmins == 1  # written by the caller's transaction itself (no savepoint)
        assert await outbox_count(pool) == rows + 1


async def test_edit_window_and_sender_checks(pool: asyncpg.Pool) -> None:
    alice, bob, dave = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        sent = await messages.send_message(conn, chat_id=chat, sender=alice, body="v1")
        state, rows = await domain_snapshot(pool), await outbox_count(pool)
        with pytest.raises(Forbidden, match="only the sender"):
            await messages.edit_message(
                conn, chat_id=chat, message_id=sent.message_id, editor=bob, body="x"
            )
        with pytest.raises(Forbidden, match="only the sender"):
            await messages.delete_message(conn, chat_id=chat, message_id=sent.message_id, actor=bob)
        with pytest.raises(Forbidden):
            await messages.edit_message(
                conn, chat_id=chat, message_id=sent.message_id, editor=dave, body="x"
            )
        with pytest.raises(NotFound):
            await messages.edit_message(
                conn, chat_id=chat, message_id=uuid4(), editor=alice, body="x"
            )
        await conn.execute(
            "UPDATE messenger.messages SET sent_at = now() - interval '59 seconds' WHERE id = $1",
            sent.message_id,
        )
        state = await domain_snapshot(pool)
        await messages.edit_message(
            conn, chat_id=chat, message_id=sent.message_id, editor=alice, body="v2"
        )
        rows += 1
        await conn.execute(
            "UPDATE messenger.messages SET sent_at = now() - interval '61 seconds' WHERE id = $1",
            sent.message_id,
        )
        state = await domain_snapshot(pool)
        with pytest.raises(Conflict, match="edit window of 60 s"):
            await messages.edit_message(
                conn, chat_id=chat, message_id=sent.message_id, editor=alice, body="v3"
            )
        assert await domain_snapshot(pool) == state
        assert await outbox_count(pool) == rows
        body = await conn.fetchval(
            "SELECT body FROM messenger.messages WHERE id = $1", sent.message_id
        )
        assert body == "v2"


async def test_blocked_user_cannot_message_or_call_the_blocker(pool: asyncpg.Pool) -> None:
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        direct = await chats.create_chat(conn, creator=alice, title="a+b", members=[bob])
        group = await chats.create_chat(conn, creator=alice, title="g", members=[bob, carol])
        await blacklist.block_user(conn, owner=bob, blocked=alice)
        rows = await outbox_count(pool)
        with pytest.raises(Forbidden, match="blocked"):
            await messages.send_message(conn, chat_id=direct, sender=alice, body="hi")
        with pytest.raises(Forbidden, match="blocked"):
            await calls.start_call(conn, caller=alice, callee=bob)
        with pytest.raises(Forbidden, match="blocked"):
            await contacts.request_contact(conn, requester=alice, addressee=bob)
        with pytest.raises(Forbidden, match="blocked"):
            await chats.create_chat(conn, creator=alice, title="again", members=[bob])
        other = await chats.create_chat(conn, creator=alice, title="o", members=[carol])
        with pytest.raises(Forbidden, match="blocked"):
            await chats.add_participant(conn, chat_id=other, actor=alice, user_id=bob)
        # One row: the creation of "o" (its chat_updated); nothing of the refused attempts.
        assert await outbox_count(pool) == rows + 1
        assert await conn.fetchval("SELECT count(*) FROM messenger.call_sessions") == 0
        # The blocker still reaches the blocked user; a group chat is not silenced.
        await messages.send_message(conn, chat_id=direct, sender=bob, body="I blocked you")
        await messages.send_message(conn, chat_id=group, sender=alice, body="to everyone")
        await calls.start_call(conn, caller=bob, callee=alice)
        with pytest.raises(Conflict):
            await blacklist.block_user(conn, owner=bob, blocked=alice)
        await blacklist.unblock_user(conn, owner=bob, blocked=alice)
        await messages.send_message(conn, chat_id=direct, sender=alice, body="thanks")
        await calls.start_call(conn, caller=alice, callee=bob)
        with pytest.raises(NotFound):
            await blacklist.unblock_user(conn, owner=bob, blocked=alice)
        with pytest.raises(InvalidInput):
            await blacklist.block_user(conn, owner=bob, blocked=bob)


async def _refused_everything_in(conn: asyncpg.Connection, chat: UUID, actor: UUID) -> None:
    """``actor`` can neither post, edit, add members, rename, nor start a conference in
    ``chat``: every attempt is Forbidden and writes nothing."""
    attempts = {
        "post": messages.send_message(conn, chat_id=chat, sender=actor, body="let me in"),
        "add a member": chats.add_participant(conn, chat_id=chat, actor=actor, user_id=uuid4()),
        "rename": chats.rename_chat(conn, chat_id=chat, actor=actor, title="renamed"),
        "start a conference": conferences.start_conference(conn, chat_id=chat, actor=actor),
    }
    for name, attempt in attempts.items():
        with pytest.raises(Forbidden, match="blocked"):
            await attempt
        assert not conn.is_in_transaction(), name


async def test_the_block_holds_in_a_chat_that_was_the_two_of_them(pool: asyncpg.Pool) -> None:
    """Bob blocks Alice. Wherever the chat is, or has been since the block, Alice and Bob
    alone, Alice is refused everything, however many strangers she adds first; a group chat
    that never came down to the two of them is not silenced."""
    alice, bob, carol, stranger = uuid4(), uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        direct = await chats.create_chat(conn, creator=alice, title="a+b", members=[bob])
        early = await messages.send_message(conn, chat_id=direct, sender=alice, body="hi")
        group = await chats.create_chat(conn, creator=alice, title="g", members=[bob, carol])
        shrinking = await chats.create_chat(conn, creator=carol, title="s", members=[alice, bob])
        await blacklist.block_user(conn, owner=bob, blocked=alice)
        rows = await outbox_count(pool)
        await _refused_everything_in(conn, direct, alice)
        with pytest.raises(Forbidden, match="blocked"):
            await messages.edit_message(
                conn, chat_id=direct, message_id=early.message_id, editor=alice, body="edited"
            )
        with pytest.raises(Forbidden, match="blocked"):
            await calls.start_call(conn, caller=alice, callee=bob)
        # A stranger in the chat (added by the blocker, so the add itself is allowed) changes
        # nothing: the chat was the two of them when the block was placed.
        await chats.add_participant(conn, chat_id=direct, actor=bob, user_id=stranger)
        rows = await outbox_count(pool)
        await _refused_everything_in(conn, direct, alice)
        # A conference the blocker starts there cannot be joined, nor used to invite.
        conference = await conferences.start_conference(conn, chat_id=direct, actor=bob)
        rows = await outbox_count(pool)
        with pytest.raises(Forbidden, match="blocked"):
            await conferences.join_conference(conn, conference_id=conference, actor=alice)
        with pytest.raises(Forbidden, match="blocked"):
            await conferences.invite_to_conference(
                conn, conference_id=conference, actor=alice, user_id=stranger
            )
        assert await outbox_count(pool) == rows
        # A group that came down to the two of them after the block: the same, and a member
        # added afterwards does not lift it.
        await messages.send_message(conn, chat_id=shrinking, sender=alice, body="group ok")
        await chats.remove_participant(conn, chat_id=shrinking, actor=carol, user_id=carol)
        await chats.set_participant(conn, chat_id=shrinking, user_id=stranger, active=True)
        await _refused_everything_in(conn, shrinking, alice)
        # A group that never was the two of them is not silenced, for anything.
        await messages.send_message(conn, chat_id=group, sender=alice, body="to everyone")
        await chats.rename_chat(conn, chat_id=group, actor=alice, title="still a group")
        await conferences.start_conference(conn, chat_id=group, actor=alice)
        # Once the blocker has left, nobody is reached through the chat: the block is moot.
        await chats.remove_participant(conn, chat_id=direct, actor=bob, user_id=bob)
        await messages.send_message(conn, chat_id=direct, sender=alice, body="only a stranger")
        # Unblocked: everything again; blocked anew: only chats that are the two of them now.
        await blacklist.unblock_user(conn, owner=bob, blocked=alice)
        await messages.send_message(conn, chat_id=shrinking, sender=alice, body="friends again")
        await blacklist.block_user(conn, owner=bob, blocked=alice)
        await messages.send_message(conn, chat_id=shrinking, sender=alice, body="three of us")
        fresh = await chats.create_chat(conn, creator=bob, title="b+a", members=[alice])
        await _refused_everything_in(conn, fresh, alice)


async def test_record_level_checks(pool: asyncpg.Pool) -> None:
    alice, bob, carol, dave = uuid4(), uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob, carol])
        call = await calls.start_call(conn, caller=alice, callee=bob)
        state, rows = await domain_snapshot(pool), await outbox_count(pool)
        with pytest.raises(NotFound):  # not a party: the call does not exist for carol
            await calls.answer_call(conn, call_id=call, actor=carol)
        with pytest.raises(Forbidden, match="callee"):
            await calls.answer_call(conn, call_id=call, actor=alice)
        with pytest.raises(Forbidden, match="caller"):
            await calls.cancel_call(conn, call_id=call, actor=bob)
        with pytest.raises(Conflict):  # ringing, not active
            await calls.end_call(conn, call_id=call, actor=alice)
        with pytest.raises(Conflict):  # cannot record a call nobody answered
            await recordings.start_recording(conn, actor=alice, call_id=call)
        with pytest.raises(NotFound):
            await recordings.start_recording(conn, actor=carol, call_id=call)
        with pytest.raises(Forbidden):
            await conferences.start_conference(conn, chat_id=chat, actor=dave)
        with pytest.raises(NotFound):
            await conferences.start_conference(conn, chat_id=uuid4(), actor=alice)
        with pytest.raises(Forbidden):
            await chats.get_chat(conn, chat_id=chat, viewer=dave)
        with pytest.raises(Forbidden, match="creator"):
            await chats.remove_participant(conn, chat_id=chat, actor=bob, user_id=carol)
        with pytest.raises(InvalidInput, match="beyond"):
            await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=5)
        with pytest.raises(InvalidInput):
            await calls.start_call(conn, caller=alice, callee=alice)
        request = await contacts.request_contact(conn, requester=alice, addressee=bob)
        state, rows = await domain_snapshot(pool), await outbox_count(pool)
        with pytest.raises(Forbidden, match="addressee"):
            await contacts.accept_contact(conn, request_id=request, actor=alice)
        with pytest.raises(NotFound):
            await contacts.accept_contact(conn, request_id=request, actor=carol)
        with pytest.raises(Conflict):
            await contacts.request_contact(conn, requester=alice, addressee=bob)
        with pytest.raises(Conflict, match="accept it"):
            await contacts.request_contact(conn, requester=bob, addressee=alice)
        conference = await conferences.start_conference(conn, chat_id=chat, actor=alice)
        with pytest.raises(Conflict, match="already running"):
            await conferences.start_conference(conn, chat_id=chat, actor=bob)
        with pytest.raises(Conflict, match="not a member"):
            await conferences.invite_to_conference(
                conn, conference_id=conference, actor=alice, user_id=dave
            )
        with pytest.raises(Forbidden, match="started"):
            await conferences.end_conference(conn, conference_id=conference, actor=bob)
        with pytest.raises(Forbidden):
            await conferences.join_conference(conn, conference_id=conference, actor=dave)
    assert await outbox_count(pool) == rows + 1  # only the conference start
    # Nothing but the contact request and the conference were ever written by the refusals.
    assert (await domain_snapshot(pool))["messages"] == state["messages"]


async def test_read_marks_only_move_forward(pool: asyncpg.Pool) -> None:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        for _ in range(3):
            await messages.send_message(conn, chat_id=chat, sender=alice, body="x")
        assert await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=2)
        rows = await outbox_count(pool)
        assert not await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=1)
        assert not await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=2)
        assert await outbox_count(pool) == rows
        assert await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=3)


async def reaper_turns(
    pool: asyncpg.Pool, database_url: str, reaper: CallTimeoutReaper, call: UUID, status: str
) -> None:
    """The scheduled job, left to itself, brings ``call`` to ``status``."""
    metrics = reaper.metrics
    job = ScheduledJob(
        reaper,
        connect=lambda: asyncpg.connect(database_url),
        schedule=JobSchedule(interval=0.05, lock_ttl=10, max_run_duration=5),
        metrics=metrics,
    )
    task = asyncio.create_task(job.run())
    try:
        for _ in range(100):
            now = await pool.fetchval(
                "SELECT status FROM messenger.call_sessions WHERE id = $1", call
            )
            if now == status:
                break
            await asyncio.sleep(0.02)
        assert now == status
    finally:
        job.request_stop()
        await asyncio.wait_for(task, 10)


async def sweep(reaper: CallTimeoutReaper) -> dict[str, int]:
    """One run of the job's work, unscheduled: what it did."""
    run = JobRun(deadline=time.monotonic() + 30, stop=asyncio.Event())
    await reaper.run_once(run)
    return run.counts


async def answered_call(conn: Any, caller: UUID, callee: UUID) -> UUID:
    """A call from ``caller`` that ``callee`` answered."""
    call = await calls.start_call(conn, caller=caller, callee=callee)
    await calls.answer_call(conn, call_id=call, actor=callee)
    return call


async def test_reaper_turns_only_stale_ringing_calls_into_missed(
    pool: asyncpg.Pool, database_url: str
) -> None:
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        stale = await calls.start_call(conn, caller=alice, callee=bob)
        answered = await answered_call(conn, carol, bob)
        await conn.execute(
            "UPDATE messenger.call_sessions SET created_at = now() - interval '50 seconds'"
        )
        fresh = await calls.start_call(conn, caller=carol, callee=alice)
        rows = await outbox_count(pool)
    metrics = MediaJobMetrics(CollectorRegistry())
    reaper = CallTimeoutReaper(pool, CallReaperOptions(ring_timeout=45), metrics)
    assert await sweep(reaper) == {"calls_missed": 1, "calls_overlong": 0}
    assert await outbox_count(pool) == rows + 2
    missed = await pool.fetch(
        "SELECT target_user_id FROM messenger.realtime_outbox WHERE kind = 'CallMissed'"
    )
    assert {r["target_user_id"] for r in missed} == {alice, bob}
    statuses = dict(await pool.fetch("SELECT id, status FROM messenger.call_sessions"))
    assert statuses == {stale: "Missed", answered: "Active", fresh: "Ringing"}
    async with pool.acquire() as conn:
        assert await reap_unanswered_calls(conn, ring_timeout=45) == []
        with pytest.raises(Conflict):  # a missed call can no longer be answered
            await calls.answer_call(conn, call_id=stale, actor=bob)
    # The periodic task does the same on its own.
    await pool.execute(
        "UPDATE messenger.call_sessions SET created_at = now() - interval '1 hour' WHERE id = $1",
        fresh,
    )
    await reaper_turns(pool, database_url, reaper, fresh, "Missed")
    ran = metrics.registry.get_sample_value(
        "messenger_realtime_job_runs_total", {"job": "call-timeout-reaper", "result": "ran"}
    )
    assert ran is not None
    assert ran >= 1
    reaped = metrics.registry.get_sample_value(
        "messenger_realtime_call_reaped_total", {"reason": "missed"}
    )
    assert reaped == 2  # the sweep's one, then the scheduled job's


async def test_reaper_ends_calls_past_the_maximum_duration_with_call_ended(
    pool: asyncpg.Pool, database_url: str
) -> None:
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        stale = await answered_call(conn, alice, bob)
        await conn.execute(
            "UPDATE messenger.call_sessions SET created_at = now() - interval '2 hours',"
            " answered_at = now() - interval '2 hours'"
        )
        live = await answered_call(conn, carol, bob)
        ringing = await calls.start_call(conn, caller=carol, callee=alice)
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    metrics = MediaJobMetrics(CollectorRegistry())
    options = CallReaperOptions(ring_timeout=45, max_duration=3600)
    reaper = CallTimeoutReaper(pool, options, metrics)
    assert await sweep(reaper) == {"calls_missed": 0, "calls_overlong": 1}
    statuses = dict(await pool.fetch("SELECT id, status FROM messenger.call_sessions"))
    assert statuses == {stale: "Ended", live: "Active", ringing: "Ringing"}
    ended = await pool.fetch(
        "SELECT target_user_id FROM messenger.realtime_outbox WHERE kind = 'CallEnded'"
    )
    assert {r["target_user_id"] for r in ended} == {alice, bob}
    # The CallEnded rows are delivered to both parties: ended by nobody.
    stack = make_stack(pool)
    assert (await stack.dispatcher.run_pass()).dispatched == 2
    assert {p.group for p in stack.publisher.pushes} == {f"user:{alice}", f"user:{bob}"}
    for push in stack.publisher.pushes:
        assert push.target == "call_ended"
        assert "endedByUserId" not in push.payload
    async with pool.acquire() as conn:
        assert await reap_overlong_calls(conn, max_duration=3600) == []
        with pytest.raises(Conflict):  # an ended call cannot be ended again
            await calls.end_call(conn, call_id=stale, actor=alice)
    # The periodic task ends them on its own too.
    await pool.execute(
        "UPDATE messenger.call_sessions SET answered_at = now() - interval '2 hours' WHERE id = $1",
        live,
    )
    await reaper_turns(pool, database_url, reaper, live, "Ended")


async def test_builders_refuse_a_row_aimed_at_the_wrong_audience(pool: asyncpg.Pool) -> None:
    """A hand-written row that would send an entity to someone not allowed to see it is
    quarantined, never delivered."""
    alice, bob, mallory = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        other_chat = await chats.create_chat(conn, creator=mallory, title="m")
        call = await calls.start_call(conn, caller=alice, callee=bob)
        request = await contacts.request_contact(conn, requester=alice, addressee=bob)
        event = await chats.rename_chat(conn, chat_id=chat, actor=alice, title="renamed")
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    forged = [
        ("CallInvited", "User", None, mallory, call, "Direct"),
        ("ContactRequestReceived", "User", None, mallory, request, None),
        ("ChatUpdated", "ChatGroup", other_chat, None, event, None),
        ("ConferenceStarted", "ChatGroup", chat, None, uuid4(), "Conference"),
    ]
    await pool.executemany(
        "INSERT INTO messenger.realtime_outbox"
        " (id, kind, target_kind, chat_id, target_user_id, ref_id, session_kind)"
        " VALUES (messenger.realtime_new_id(), $1, $2, $3, $4, $5, $6)",
        forged,
    )
    stack = make_stack(pool)
    await stack.dispatcher.run_pass()
    assert stack.publisher.pushes == []
    errors = await pool.fetch(
        "SELECT kind, last_error FROM messenger.realtime_outbox WHERE status = 'Quarantined'"
    )
    reasons = {r["kind"]: r["last_error"] for r in errors}
    assert set(reasons) == {
        "CallInvited",
        "ContactRequestReceived",
        "ChatUpdated",
        "ConferenceStarted",
    }
    assert "TargetMismatch" in reasons["CallInvited"]
    assert "TargetMismatch" in reasons["ContactRequestReceived"]
    assert "TargetMismatch" in reasons["ChatUpdated"]
    assert "ConferenceNotFound" in reasons["ConferenceStarted"]
    for r in errors:  # error class and code only: no ids
        assert str(mallory) not in r["last_error"]
        assert str(chat) not in r["last_error"]


async def test_server_made_ids_are_uuidv7_in_call_order(pool: asyncpg.Pool) -> None:
    rows = await pool.fetch(
        "SELECT clock_timestamp() AS before, messenger.realtime_new_id() AS id,"
        " clock_timestamp() AS after FROM generate_series(1, 200)"
    )
    ids = [r["id"] for r in rows]
    assert all(i.version == 7 and i.variant == "specified in RFC 4122" for i in ids)
    assert len(set(ids)) == len(ids)
    for r in rows:  # the milliseconds of the moment it was made
        millis = r["id"].int >> 80
        assert int(r["before"].timestamp() * 1000) <= millis <= int(r["after"].timestamp() * 1000)
    # Made one after the other (microseconds apart at least): in order.
    async with pool.acquire() as conn:
        serial = [await conn.fetchval("SELECT messenger.realtime_new_id()") for _ in range(100)]
    assert serial == sorted(serial)


async def test_nothing_of_a_deleted_message_remains(pool: asyncpg.Pool) -> None:
    """After delete, every table dumped holds neither the text nor its plain hash (the
    idempotency fingerprint was keyed, and is blanked with the message)."""
    alice, bob = uuid4(), uuid4()
    key = b"fingerprint-key-" + b"k" * 16
    secret_text = f"PIN 4711 {uuid4().hex[:6]}"
    content = messages.MessageContent(body=secret_text)
    canonical = orjson.dumps(["Text", secret_text, None, None], option=orjson.OPT_SORT_KEYS)
    plain_hash = hashlib.sha256(canonical).hexdigest()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        # Alice's send with client id c1, as a retrying client sends it.
        send_c1 = functools.partial(
            messages.send_message,
            conn,
            chat_id=chat,
            sender=alice,
            client_message_id="c1",
            fingerprint_key=key,
        )
        sent = await send_c1(content=content)
        stored = await conn.fetchval(
            "SELECT fingerprint FROM messenger.message_client_ids WHERE message_id = $1",
            sent.message_id,
        )
        assert bytes(stored) == content.fingerprint(key) != bytes.fromhex(plain_hash)
        with pytest.raises(Conflict):  # before delete, a reuse with other content is told apart
            await send_c1(body="other")
        await messages.delete_message(conn, chat_id=chat, message_id=sent.message_id, actor=alice)
        dumped = await table_texts(pool)
        hits = [
            f"{table}: {what}"
            for table, text in dumped.items()
            for what, needle in (("text", secret_text), ("plain hash", plain_hash))
            if needle in text
        ]
        assert not hits, hits
        assert content.fingerprint(key).hex() not in "".join(dumped.values())
        # A retry of the deleted send is still a repeat: nothing is sent again.
        again = await send_c1(content=content)
        assert (again.repeated, again.message_id) == (True, sent.message_id)


async def test_the_block_reaches_media_recordings_contacts_receipts_and_deletes(
    pool: asyncpg.Pool,
) -> None:
    """H16, H17: Bob blocks Alice. In their 1:1 chat and their call, Alice gets no media
    credentials (over REST, in a push, in a sync event), cannot start a recording or a screen
    share, nor report a recording as failed (a 64-character text channel); she may still stop
    one. The pending contact requests between them, both ways, end; her read receipts and
    deletes there are recorded and not pushed; Bob's still are."""
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    minter = MediaMinter(MEDIA)
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="a+b", members=[bob])
        sent = await messages.send_message(conn, chat_id=chat, sender=alice, body="hi")
        await messages.send_message(conn, chat_id=chat, sender=bob, body="hello")
        to_alice = await contacts.request_contact(conn, requester=bob, addressee=alice)
        await contacts.request_contact(conn, requester=alice, addressee=carol)
        call = await answered_call(conn, bob, alice)
        running = await recordings.start_recording(conn, actor=bob, call_id=call)
        await blacklist.block_user(conn, owner=bob, blocked=alice)
        await blacklist.block_user(conn, owner=carol, blocked=alice)
        conference = await conferences.start_conference(conn, chat_id=chat, actor=bob)
        rows = await outbox_count(pool)
        refused = {
            "conference media": media_join.conference_media(
                conn, minter, conference_id=conference, user=alice
            ),
            "call media": media_join.call_media(conn, minter, call_id=call, user=alice),
            "record the call": recordings.start_recording(conn, actor=alice, call_id=call),
            "record the conference": recordings.start_recording(
                conn, actor=alice, conference_id=conference
            ),
            "share in the call": screenshare.start_screen_share(conn, actor=alice, call_id=call),
            "share in the conference": screenshare.start_screen_share(
                conn, actor=alice, conference_id=conference
            ),
            "report a failure": recordings.mark_recording_failed(
                conn, recording_id=running, actor=alice, code="x" * 64
            ),
            "accept the blocker's request": contacts.accept_contact(
                conn, request_id=to_alice, actor=alice
            ),
        }
        for name, attempt in refused.items():
            with pytest.raises(Forbidden if name != "accept the blocker's request" else Conflict):
                await attempt
            assert not conn.is_in_transaction(), name
        assert await outbox_count(pool) == rows
        assert await contacts.list_requests(conn, user=alice) == []  # both ways
        assert await contacts.list_requests(conn, user=carol) == []
        # The blocker keeps everything; the blocked user may still stop a recording.
        assert (
            await media_join.conference_media(conn, minter, conference_id=conference, user=bob)
        ).access_token
        await recordings.stop_recording(conn, recording_id=running, actor=alice)
        # Read and delete: recorded, not pushed.
        await reads.mark_read(conn, chat_id=chat, user_id=alice, seq=2)
        await messages.delete_message(conn, chat_id=chat, message_id=sent.message_id, actor=alice)
        assert await conn.fetchval(
            "SELECT deleted_at IS NOT NULL FROM messenger.messages WHERE id = $1", sent.message_id
        )
        assert await outbox_count(pool) == rows + 2  # the stop alone (to both parties)
        await reads.mark_read(conn, chat_id=chat, user_id=bob, seq=2)
        assert await outbox_count(pool) == rows + 3

    # The conference's push (and so its sync event) carries no media: the chat is theirs.
    stack = make_stack(pool)
    await stack.dispatcher.run_pass()
    started = [p for p in stack.publisher.pushes if p.target == "conference_started"]
    assert len(started) == 1
    assert started[0].payload.get("media") is None
    built = await default_payload_builder(MEDIA).build(
        pool, await _outbox_rows(pool, "ConferenceStarted")
    )
    assert len(built) == 1
    assert all(isinstance(b, Push) and b.payload.get("media") is None for b in built.values())
    # After the unblock, media again.
    async with pool.acquire() as conn:
        await blacklist.unblock_user(conn, owner=bob, blocked=alice)
        assert (
            await media_join.conference_media(conn, minter, conference_id=conference, user=alice)
        ).access_token
    built = await default_payload_builder(MEDIA).build(
        pool, await _outbox_rows(pool, "ConferenceStarted")
    )
    assert len(built) == 1
    assert all(isinstance(b, Push) and b.payload.get("media") for b in built.values())


async def _outbox_rows(pool: asyncpg.Pool, kind: str) -> list[ClaimedRow]:
    records = await pool.fetch(
        "SELECT id, kind, target_kind, chat_id, target_user_id, message_id, ref_id,"
        " session_kind, seq, attempts, row_version, created_at"
        " FROM messenger.realtime_outbox WHERE kind = $1",
        kind,
    )
    return [ClaimedRow(**dict(r)) for r in records]
