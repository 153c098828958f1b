"""The spec's test table, worker rows, against a real PostgreSQL and a recording publisher."""

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import asyncpg
import pytest

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.alerts import RealtimeDispatchQuarantinedEvent
from realtime_dispatch.errors import HubUnavailable, PushRejected
from realtime_dispatch.messenger import commands, conferences
from tests.fakes import RecordingPublisher
from tests.integration.support import make_due, make_stack, new_chat, row, send


async def test_successful_delivery_marks_done_and_counts(pool: asyncpg.Pool) -> None:
    member = uuid4()
    chat, sender = await new_chat(pool, member)
    sent = await send(pool, chat, sender, "hello")
    stack = make_stack(pool)

    report = await stack.dispatcher.run_pass()

    assert report.dispatched == 1
    [push] = stack.publisher.pushes
    assert push.group == f"chat:{chat}"
    assert push.target == "message_received"
    assert push.payload == {
        "eventId": str(sent.outbox_id),
        "chatId": str(chat),
        "messageId": str(sent.message_id),
        "seq": 1,
        "senderUserId": str(sender),
        "kind": "Text",
        "sentAt": push.payload["sentAt"],
        "body": "hello",
    }
    sent_at = datetime.fromisoformat(str(push.payload["sentAt"]))
    assert sent_at.tzinfo is not None
    assert sent_at.utcoffset() == timedelta(0)
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"], r["last_error"]) == ("Done", 1, None)
    assert stack.counter("messenger_realtime_dispatched") == 1
    assert stack.metrics.registry.get_sample_value("messenger_realtime_lag_seconds_count") == 1


async def test_empty_pass_makes_no_publisher_call(pool: asyncpg.Pool) -> None:
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    assert (report.claimed, stack.publisher.calls) == (0, 0)


async def test_rows_not_yet_due_are_left_alone(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET next_attempt_at = now() + interval '1 hour'"
    )
    stack = make_stack(pool)
    assert (await stack.dispatcher.run_pass()).claimed == 0
    assert (await row(pool, sent.outbox_id))["attempts"] == 0


async def test_hub_unavailable_keeps_row_pending_with_backoff_then_retries(
    pool: asyncpg.Pool,
) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    down = RecordingPublisher(fail=lambda _: HubUnavailable("down", code="Unreachable"))
    stack = make_stack(pool, publisher=down, backoff_base=30.0, backoff_cap=60.0)
    before = await pool.fetchval("SELECT now()")

    report = await stack.dispatcher.run_pass()

    assert (report.dispatched, report.retried) == (0, 1)
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"]) == ("Pending", 1)
    assert r["last_error"] == "HubUnavailable:Unreachable: down"
    delay = (r["next_attempt_at"] - before).total_seconds()
    assert 30 * 0.8 - 1 <= delay <= 30 + 1  # backoff(1) = base, shortened by jitter at most 20 %
    assert stack.counter("messenger_realtime_retried") == 1
    # Not due yet: the next pass does nothing.
    assert (await stack.dispatcher.run_pass()).claimed == 0
    # Due again and the hub is back: delivered.
    await make_due(pool)
    down.fail = lambda _: None
    assert (await stack.dispatcher.run_pass()).dispatched == 1
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"], r["last_error"]) == ("Done", 2, None)


async def test_second_attempt_waits_longer(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    down = RecordingPublisher(fail=lambda _: HubUnavailable("down"))
    stack = make_stack(pool, publisher=down, backoff_base=10.0, backoff_cap=1000.0)
    await stack.dispatcher.run_pass()
    await make_due(pool)
    now = await pool.fetchval("SELECT now()")
    await stack.dispatcher.run_pass()
    r = await row(pool, sent.outbox_id)
    assert r["attempts"] == 2
    assert (r["next_attempt_at"] - now).total_seconds() >= 20 * 0.8 - 1


async def test_poison_is_quarantined_after_max_attempts_with_alert(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    down = RecordingPublisher(fail=lambda _: HubUnavailable("down"))
    stack = make_stack(pool, publisher=down, max_attempts=3)
    for _ in range(3):
        await make_due(pool)
        await stack.dispatcher.run_pass()
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"]) == ("Quarantined", 3)
    assert stack.counter("messenger_realtime_retried") == 2
    assert stack.counter("messenger_realtime_quarantined") == 1
    [event] = stack.alerts.events
    assert isinstance(event, RealtimeDispatchQuarantinedEvent)
    assert (event.outbox_entry_id, event.kind, event.chat_id, event.attempts) == (
        sent.outbox_id,
        "MessageReceived",
        chat,
        3,
    )
    # Quarantined rows are never claimed again.
    await make_due(pool)
    assert (await stack.dispatcher.run_pass()).claimed == 0


async def test_missing_reference_is_quarantined_at_once(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    await pool.execute("DELETE FROM messenger.messages WHERE id = $1", sent.message_id)
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    assert (report.quarantined, stack.publisher.calls) == (1, 0)
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"]) == ("Quarantined", 1)
    assert r["last_error"] == "PayloadBuildError:MessageNotFound: referenced message does not exist"
    assert len(stack.alerts.events) == 1


async def test_rows_of_a_deleted_chat_are_done_with_a_reason_and_no_alert(
    pool: asyncpg.Pool,
) -> None:
    chat, sender = await new_chat(pool)
    kept_chat, kept_sender = await new_chat(pool)
    gone = [await send(pool, chat, sender, f"m{i}") for i in range(3)]
    async with pool.acquire() as conn:
        conference = await conferences.start_conference(conn, chat_id=chat, actor=sender)
    kept = await send(pool, kept_chat, kept_sender)
    # Deleting the chat cascades its messages and conference away; the rows stay Pending.
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", chat)
    stack = make_stack(pool)

    report = await stack.dispatcher.run_pass()

    assert (report.dispatched, report.target_gone, report.quarantined) == (1, 4, 0)
    assert [p.group for p in stack.publisher.pushes] == [f"chat:{kept_chat}"]
    for sent in gone:
        r = await row(pool, sent.outbox_id)
        assert (r["status"], r["last_error"]) == (
            "Done",
            "TargetGone:ChatGone: the target chat no longer exists",
        )
    started = await pool.fetchrow(
        "SELECT status, last_error FROM messenger.realtime_outbox WHERE ref_id = $1", conference
    )
    assert started["status"] == "Done"
    assert "ChatGone" in started["last_error"]
    assert (await row(pool, kept.outbox_id))["status"] == "Done"
    assert stack.alerts.events == []
    assert stack.counter("messenger_realtime_target_gone") == 3
    assert stack.counter("messenger_realtime_target_gone", "ConferenceStarted") == 1
    assert stack.counter("messenger_realtime_quarantined") == 0
    assert stack.counter("messenger_realtime_dispatched") == 1


async def test_a_failing_row_never_affects_its_neighbours(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    other_chat, other_sender = await new_chat(pool)
    good = [await send(pool, chat, sender, f"m{i}") for i in range(5)]
    rejected = await send(pool, other_chat, other_sender)
    gone = await send(pool, chat, sender)
    await pool.execute("DELETE FROM messenger.messages WHERE id = $1", gone.message_id)

    def fail(push: Push) -> PushRejected | None:
        return PushRejected("400", code="Http400") if push.group == f"chat:{other_chat}" else None

    stack = make_stack(pool, publisher=RecordingPublisher(fail=fail))
    report = await stack.dispatcher.run_pass()
    assert (report.dispatched, report.quarantined) == (5, 2)
    statuses = {
        r["id"]: r["status"]
        for r in await pool.fetch("SELECT id, status FROM messenger.realtime_outbox")
    }
    assert all(statuses[s.outbox_id] == "Done" for s in good)
    assert statuses[rejected.outbox_id] == "Quarantined"
    assert statuses[gone.outbox_id] == "Quarantined"
    # Pushed in outbox (= seq) order.
    assert [p.payload["seq"] for p in stack.publisher.pushes] == [1, 2, 3, 4, 5]


async def test_publisher_exception_is_contained(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)

    class Exploding(RecordingPublisher):
        async def publish(self, pushes, **_):  # type: ignore[no-untyped-def]
            raise RuntimeError("bug")

    stack = make_stack(pool, publisher=Exploding())
    report = await stack.dispatcher.run_pass()
    assert report.retried == 1
    r = await row(pool, sent.outbox_id)
    assert r["status"] == "Pending"
    assert r["last_error"] == "TransientError:PublishFailed: RuntimeError"


async def test_loop_continues_while_batches_are_full(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    for i in range(25):
        await send(pool, chat, sender, f"m{i}")
    stack = make_stack(pool, batch_size=10)
    report = await stack.dispatcher.run_pass()
    assert (report.batches, report.dispatched) == (3, 25)


@pytest.mark.parametrize(("linger", "second_after", "batches"), [(0.5, 0.05, 2), (0.0, 0.3, 1)])
async def test_after_a_batch_that_was_not_full_the_pass_lingers(
    pool: asyncpg.Pool, linger: float, second_after: float, batches: int
) -> None:
    """A row committed during the linger joins the same pass; without one the pass claims again
    at once, finds nothing and ends."""
    chat, sender = await new_chat(pool)
    await send(pool, chat, sender, "first")
    publisher = RecordingPublisher()
    late: list[asyncio.Task[object]] = []

    async def publish(pushes, **_):  # type: ignore[no-untyped-def]
        if not late:
            late.append(asyncio.create_task(later(send(pool, chat, sender, "second"))))
        return [None] * len(pushes)

    async def later(work):  # type: ignore[no-untyped-def]
        await asyncio.sleep(second_after)
        return await work

    publisher.publish = publish  # type: ignore[method-assign]
    stack = make_stack(pool, publisher=publisher, batch_size=10, linger=linger)
    report = await stack.dispatcher.run_pass()
    await late[0]
    assert (report.batches, report.dispatched) == (batches, batches)


async def test_max_run_duration_ends_the_pass(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    for i in range(30):
        await send(pool, chat, sender, f"m{i}")
    slow = RecordingPublisher()
    stack = make_stack(pool, publisher=slow, batch_size=10, max_run_duration=0.05)

    async def slow_publish(pushes, **_):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.06)
        return [None] * len(pushes)

    slow.publish = slow_publish  # type: ignore[method-assign]
    report = await stack.dispatcher.run_pass()
    assert (report.batches, report.dispatched, report.more_waiting) == (1, 10, True)


async def test_stale_row_version_outcome_is_ignored(pool: asyncpg.Pool) -> None:
    """A runner whose claim was overtaken (e.g. after failover) cannot overwrite the row."""
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    gate = asyncio.Event()
    slow = RecordingPublisher(fail=lambda _: PushRejected("400"))
    slow.gate = gate
    stack = make_stack(pool, publisher=slow)
    task = asyncio.create_task(stack.dispatcher.run_pass())
    await asyncio.wait_for(_until_called(slow), 5)
    # Meanwhile another runner delivered the row and marked it Done.
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET status = 'Done', row_version = row_version + 1"
    )
    gate.set()
    report = await task
    assert report.quarantined == 0
    assert (await row(pool, sent.outbox_id))["status"] == "Done"


async def test_outcomes_lost_to_a_row_version_conflict_are_not_counted(
    pool: asyncpg.Pool,
) -> None:
    """Four rows claimed, two of them taken over while their pushes are in flight (another
    runner claimed them, as after a failover or an expired lease: their row_version moved): the
    pass report, the metrics and the table agree that only the other two got an outcome."""
    chat, sender = await new_chat(pool)
    sent = [await send(pool, chat, sender, f"m{i}") for i in range(4)]
    ok, fails, taken_ok, taken_fails = (s.outbox_id for s in sent)
    failing = {fails, taken_fails}
    gate = asyncio.Event()
    publisher = RecordingPublisher(
        fail=lambda p: (
            HubUnavailable("down", code="Unreachable")
            if p.payload["eventId"] in {str(i) for i in failing}
            else None
        )
    )
    publisher.gate = gate
    stack = make_stack(pool, publisher=publisher, backoff_base=30.0, backoff_cap=60.0)
    task = asyncio.create_task(stack.dispatcher.run_pass())
    await asyncio.wait_for(_until_called(publisher), 5)
    # Between claim and outcome, another runner claims two of the rows (as its claim would:
    # their lease expired and were released to it).
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET row_version = row_version + 2,"
        " attempts = attempts + 1, next_attempt_at = now() + interval '1 hour'"
        " WHERE id = ANY($1)",
        [taken_ok, taken_fails],
    )
    gate.set()
    report = await task

    assert (report.claimed, report.dispatched, report.retried, report.superseded) == (4, 1, 1, 2)
    assert stack.counter("messenger_realtime_dispatched") == report.dispatched
    assert stack.counter("messenger_realtime_retried") == report.retried
    assert stack.metrics.registry.get_sample_value("messenger_realtime_superseded_total") == 2
    assert stack.metrics.registry.get_sample_value("messenger_realtime_lag_seconds_count") == 1
    statuses = {
        r["id"]: (r["status"], r["last_error"])
        for r in await pool.fetch("SELECT id, status, last_error FROM messenger.realtime_outbox")
    }
    assert statuses[ok] == ("Done", None)
    assert statuses[fails] == ("Pending", "HubUnavailable:Unreachable: down")
    # The new owner's rows: untouched by the old pass.
    assert statuses[taken_ok] == statuses[taken_fails] == ("Pending", None)


async def _until_called(publisher: RecordingPublisher) -> None:
    await publisher.called.wait()


async def test_stop_between_rows_keeps_committed_progress(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    for i in range(120):
        await send(pool, chat, sender, f"m{i}")
    stack = make_stack(pool)
    gate = asyncio.Event()
    stack.publisher.gate = gate
    task = asyncio.create_task(stack.dispatcher.run_pass())
    await asyncio.wait_for(_until_called(stack.publisher), 5)
    stack.dispatcher.request_stop()  # while the first slice is being pushed
    gate.set()
    report = await task
    assert report.stopped
    assert report.dispatched == 50  # the slice in flight completed and was recorded
    assert report.released == 70
    rows = await pool.fetch("SELECT status, attempts FROM messenger.realtime_outbox")
    assert sum(r["status"] == "Done" for r in rows) == 50
    released = [r for r in rows if r["status"] == "Pending"]
    assert len(released) == 70
    assert all(r["attempts"] == 0 for r in released)  # the aborted claim does not count
    # A fresh dispatcher delivers the rest at once.
    assert (await make_stack(pool).dispatcher.run_pass()).dispatched == 70


async def test_two_dispatchers_never_claim_the_same_row(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    async with pool.acquire() as conn:
        for i in range(400):
            await commands.send_message(conn, chat_id=chat, sender=sender, body=f"m{i}")
    a, b = make_stack(pool, batch_size=20), make_stack(pool, batch_size=20)
    await asyncio.gather(a.dispatcher.run_pass(), b.dispatcher.run_pass())
    ids_a = {p.payload["messageId"] for p in a.publisher.pushes}
    ids_b = {p.payload["messageId"] for p in b.publisher.pushes}
    assert len(ids_a) + len(ids_b) == 400
    assert not ids_a & ids_b
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Done' AND attempts = 1"
        )
        == 400
    )


async def test_row_exhausted_by_crashes_is_quarantined_without_push(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    # The worker died 3 times while handling this row (claims without outcome).
    await pool.execute("UPDATE messenger.realtime_outbox SET attempts = 3")
    stack = make_stack(pool, max_attempts=3)
    report = await stack.dispatcher.run_pass()
    assert (report.quarantined, stack.publisher.calls) == (1, 0)
    assert "AttemptsExhausted" in (await row(pool, sent.outbox_id))["last_error"]


async def test_garbage_rows_are_quarantined_with_a_reason(pool: asyncpg.Pool) -> None:
    """Rows written by hand past the constraints: never crash the worker."""
    await pool.execute(
        "ALTER TABLE messenger.realtime_outbox DROP CONSTRAINT ck_rto_kind,"
        " DROP CONSTRAINT ck_rto_session_kind, DROP CONSTRAINT ck_rto_target_id,"
        " DISABLE TRIGGER trg_rto_kind"
    )
    chat, sender = await new_chat(pool)
    good = await send(pool, chat, sender)
    garbage = {
        "unknown kind": "('Teleported', 'ChatGroup', gen_random_uuid(), NULL::uuid, NULL)",
        "missing target": "('MessageReceived', 'ChatGroup', NULL::uuid, NULL::uuid, NULL)",
        "bad session": "('CallInvited', 'User', NULL::uuid, gen_random_uuid(), 'Group')",
    }
    for values in garbage.values():
        await pool.execute(
            "INSERT INTO messenger.realtime_outbox"
            " (id, kind, target_kind, chat_id, target_user_id, session_kind)"
            f" SELECT messenger.realtime_new_id(), * FROM (VALUES {values}) AS v"
        )
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    assert (report.dispatched, report.quarantined) == (1, 3)
    errors = sorted(
        r["last_error"]
        for r in await pool.fetch(
            "SELECT last_error FROM messenger.realtime_outbox WHERE status = 'Quarantined'"
        )
    )
    assert errors == [
        "PayloadBuildError:KindUndeclared: kind Teleported is not declared in the projection"
        " manifest",
        "PayloadBuildError:MissingChatId: ChatGroup target needs chat_id",
        "PayloadBuildError:UnknownEnumValue: unknown enum value in row",
    ]
    assert (await row(pool, good.outbox_id))["status"] == "Done"


async def test_retention_deletes_only_old_done_rows(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = [await send(pool, chat, sender, f"m{i}") for i in range(6)]
    stack = make_stack(pool)
    await stack.dispatcher.run_pass()
    # Rows 0-2 Done, row 3 Pending, row 4 Quarantined, row 5 Done; all "created" long ago
    # except row 5.
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET status = 'Pending' WHERE id = $1", sent[3].outbox_id
    )
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET status = 'Quarantined' WHERE id = $1",
        sent[4].outbox_id,
    )
    future = datetime.now(UTC) + timedelta(hours=25)
    deleted = await stack.store.purge_done(older_than=86_400, now=future, limit=2)
    assert deleted == 2  # bounded batch
    deleted += await stack.store.purge_done(older_than=86_400, now=future, limit=2)
    deleted += await stack.store.purge_done(older_than=86_400, now=future, limit=2)
    assert deleted == 4  # rows 0, 1, 2 and 5 were Done
    left = {r["id"] for r in await pool.fetch("SELECT id FROM messenger.realtime_outbox")}
    assert left == {sent[3].outbox_id, sent[4].outbox_id}
    # Nothing is old enough now.
    assert await stack.store.purge_done(older_than=86_400) == 0


async def test_requeue_brings_quarantined_back(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    stack = make_stack(pool, publisher=RecordingPublisher(fail=lambda _: PushRejected("x")))
    await stack.dispatcher.run_pass()
    assert (await row(pool, sent.outbox_id))["status"] == "Quarantined"
    assert await stack.store.requeue(ids=[sent.outbox_id]) == 1
    r = await row(pool, sent.outbox_id)
    assert (r["status"], r["attempts"], r["last_error"]) == ("Pending", 0, None)
    ok = make_stack(pool)
    assert (await ok.dispatcher.run_pass()).dispatched == 1


async def test_edit_and_delete_payloads(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender, "first")
    async with pool.acquire() as conn:
        await commands.edit_message(
            conn, chat_id=chat, message_id=sent.message_id, editor=sender, body="second"
        )
        await commands.delete_message(conn, chat_id=chat, message_id=sent.message_id, actor=sender)
    stack = make_stack(pool)
    await stack.dispatcher.run_pass()
    received, edited, deleted = stack.publisher.pushes
    assert [p.target for p in stack.publisher.pushes] == [
        "message_received",
        "message_edited",
        "message_deleted",
    ]
    # The body is read at delivery: the message is deleted by now, so no body goes out.
    assert "body" not in received.payload
    assert "body" not in edited.payload
    assert set(edited.payload) == {"eventId", "chatId", "messageId", "seq", "editedAt"}
    assert set(deleted.payload) == {"eventId", "chatId", "messageId", "seq", "deletedAt"}
    assert deleted.payload["seq"] == 1
