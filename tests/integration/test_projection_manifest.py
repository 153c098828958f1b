"""The projection manifest against the real database: the shipped one holds; a query that does
not fit its contract is named with its column; a kind without a query is quarantined as
KindDisabled; a failing query fails only its own rows; a missing reference is TargetGone only
when deleted_chats returns its chat (or the deprecated chat_alive leaves it out); outbox ids
default to a UUIDv7 and refuse others."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg
import pytest
import structlog

from realtime_dispatch.dispatch.projections.builder import PayloadBuilder
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.errors import ConfigurationError, HubUnavailable
from realtime_dispatch.manifest.check import check_manifest, require_valid
from realtime_dispatch.manifest.manifest import Manifest, parse_manifest, shipped_manifest
from realtime_dispatch.messenger import calls, commands, conferences
from tests.fakes import RecordingPublisher
from tests.integration.support import Stack, make_stack, new_chat, row, send


def edited(**queries: str | None) -> Manifest:
    """The shipped manifest with some queries replaced (``None``: left out)."""
    merged = {**shipped_manifest().queries, **queries}
    text = "".join(f"-- name: {n}\n{q};\n" for n, q in merged.items() if q is not None)
    return parse_manifest(text, "/etc/realtime/projections.sql")


# A retried row must not come due again within the pass (the test counts one attempt).
SLOW_RETRY = {"backoff_base": 30.0, "backoff_cap": 60.0}


def builder_over(manifest: Manifest) -> PayloadBuilder:
    return default_payload_builder(manifest=manifest)


async def test_the_shipped_manifest_holds_on_the_reference_schema(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        results = await check_manifest(conn, shipped_manifest())
    assert [(r.name, r.detail) for r in results if r.detail != "ok"] == []
    assert len(results) == 15


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (
            "SELECT id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text,"
            " edited_at, deleted_at FROM messenger.messages WHERE id = ANY($1)",
            "messages: column sent_at missing",
        ),
        (
            "SELECT id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text,"
            " sent_at::timestamp AS sent_at, edited_at, deleted_at"
            " FROM messenger.messages WHERE id = ANY($1)",
            "messages: column sent_at is timestamp, expected timestamptz",
        ),
        (
            "SELECT id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text,"
            " sent_at, edited_at, deleted_at FROM messenger.messages WHERE seq = $1",
            "messages: takes (int8), expected one parameter $1 uuid[]",
        ),
        (
            "SELECT id FROM messenger.no_such_table WHERE id = ANY($1)",
            'messages: does not prepare: relation "messenger.no_such_table" does not exist',
        ),
    ],
)
async def test_a_query_off_its_contract_is_one_line_naming_it(
    pool: asyncpg.Pool, messages: str, problem: str
) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(ConfigurationError) as caught:
            await require_valid(conn, edited(messages=messages), needs=())
    assert str(caught.value) == f"REALTIME_PROJECTIONS: {problem} (/etc/realtime/projections.sql)"


async def test_the_hub_needs_member_chats(pool: asyncpg.Pool) -> None:
    manifest = edited(member_chats=None)
    async with pool.acquire() as conn:
        await require_valid(conn, manifest, needs=())  # a worker does not
        with pytest.raises(ConfigurationError, match="member_chats: missing"):
            await require_valid(conn, manifest, needs=("hub",))


async def _read_receipt(pool: asyncpg.Pool, chat: UUID, user: UUID) -> UUID:
    async with pool.acquire() as conn:
        await commands.mark_read(conn, chat_id=chat, user_id=user, seq=1)
    entry: UUID = await pool.fetchval(
        "SELECT id FROM messenger.realtime_outbox WHERE kind = 'ReadReceiptUpdated'"
    )
    return entry


def stack_failing_at_run_time(pool: asyncpg.Pool, name: str, select: str, table: str) -> Stack:
    """A stack (slow retries) whose manifest's ``name`` query is ``select`` made to fail at run
    time, a division by zero over ``table``: it prepares fine."""
    failing = f"{select} AND 1 / (SELECT count(*) - count(*) FROM {table})::int = 1"
    return make_stack(pool, builder=builder_over(edited(**{name: failing})), **SLOW_RETRY)


async def test_a_failing_query_fails_only_the_rows_it_serves(pool: asyncpg.Pool) -> None:
    """Two kinds in one batch: the read receipts' query fails at run time (it prepares fine);
    the message is delivered, the receipt retries with the query named, nothing else."""
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    receipt = await _read_receipt(pool, chat, sender)
    stack = stack_failing_at_run_time(
        pool,
        "read_receipts",
        "SELECT id, chat_id, user_id, last_read_seq, last_read_at FROM messenger.participants"
        " WHERE id = ANY($1::uuid[])",
        "messenger.participants",
    )

    report = await stack.dispatcher.run_pass()
    assert (report.claimed, report.dispatched, report.retried, report.quarantined) == (2, 1, 1, 0)
    assert [p.target for p in stack.publisher.pushes] == ["message_received"]
    assert (await row(pool, sent.outbox_id))["status"] == "Done"
    failed = await row(pool, receipt)
    assert (failed["status"], failed["last_error"]) == (
        "Pending",
        "TransientError:QueryFailed: the read_receipts query failed"
        " (DivisionByZeroError, SQLSTATE 22012)",
    )


async def test_a_kind_without_a_query_is_quarantined_as_kind_disabled(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    receipt = await _read_receipt(pool, chat, sender)
    stack = make_stack(pool, builder=builder_over(edited(read_receipts=None)))

    report = await stack.dispatcher.run_pass()

    assert (report.dispatched, report.quarantined) == (1, 1)
    assert (await row(pool, sent.outbox_id))["status"] == "Done"
    disabled = await row(pool, receipt)
    assert (disabled["status"], disabled["attempts"]) == ("Quarantined", 1)
    assert disabled["last_error"] == (
        "PayloadBuildError:KindDisabled: ReadReceiptUpdated is disabled:"
        " the projection manifest has no read_receipts query"
    )
    [alert] = stack.alerts.events
    assert (alert.outbox_entry_id, alert.kind) == (receipt, "ReadReceiptUpdated")


async def _enqueue_message(pool: asyncpg.Pool, chat: UUID) -> UUID:
    """A MessageReceived row as a buggy writer makes it: ids that reference nothing."""
    entry: UUID = await pool.fetchval(
        "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)"
        " VALUES ('MessageReceived', 'ChatGroup', $1, $2, 1) RETURNING id",
        chat,
        uuid4(),
    )
    return entry


async def test_a_chat_that_never_existed_is_quarantined_a_deleted_one_is_gone(
    pool: asyncpg.Pool,
) -> None:
    deleted, sender = await new_chat(pool)
    sent = await send(pool, deleted, sender)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", deleted)
    never = await _enqueue_message(pool, uuid4())
    stack = make_stack(pool)

    report = await stack.dispatcher.run_pass()

    assert (report.target_gone, report.quarantined, stack.publisher.calls) == (1, 1, 0)
    assert (await row(pool, sent.outbox_id))["last_error"] == (
        "TargetGone:ChatGone: the target chat no longer exists"
    )
    bug = await row(pool, never)
    assert (bug["status"], bug["last_error"]) == (
        "Quarantined",
        "PayloadBuildError:MessageNotFound: referenced message does not exist",
    )
    assert [a.outbox_entry_id for a in stack.alerts.events] == [never]


async def test_a_message_of_another_chat_is_a_mismatch_even_when_the_row_names_a_deleted_one(
    pool: asyncpg.Pool,
) -> None:
    """A row whose message exists, in a live chat, but which names a deleted chat (a writer's
    mistyped chat id): quarantined with the alert, never Done as TargetGone."""
    live, sender = await new_chat(pool)
    sent = await send(pool, live, sender)
    deleted, _ = await new_chat(pool)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", deleted)
    await pool.execute("DELETE FROM messenger.realtime_outbox")
    wrong: UUID = await pool.fetchval(
        "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)"
        " VALUES ('MessageEdited', 'ChatGroup', $1, $2, 1) RETURNING id",
        deleted,
        sent.message_id,
    )
    stack = make_stack(pool)

    report = await stack.dispatcher.run_pass()

    assert (report.target_gone, report.quarantined, stack.publisher.calls) == (0, 1, 0)
    bug = await row(pool, wrong)
    assert (bug["status"], bug["last_error"]) == (
        "Quarantined",
        "PayloadBuildError:TargetMismatch: row targets another chat",
    )
    assert [a.outbox_entry_id for a in stack.alerts.events] == [wrong]


async def test_without_deleted_chats_a_missing_reference_is_a_defect(pool: asyncpg.Pool) -> None:
    deleted, sender = await new_chat(pool)
    sent = await send(pool, deleted, sender)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", deleted)
    stack = make_stack(pool, builder=builder_over(edited(deleted_chats=None)))

    report = await stack.dispatcher.run_pass()

    assert (report.target_gone, report.quarantined) == (0, 1)
    assert (await row(pool, sent.outbox_id))["status"] == "Quarantined"


CHAT_ALIVE = (
    "SELECT t.id AS chat_id FROM unnest($1::uuid[]) AS t(id)"
    " WHERE EXISTS (SELECT 1 FROM messenger.chats c WHERE c.id = t.id)"
)
"""The natural (and wrong) chat_alive of the trial: "the chats that exist"."""


async def test_a_deprecated_chat_alive_still_works_and_check_warns(pool: asyncpg.Pool) -> None:
    """A manifest written for an earlier version keeps its meaning (a chat it leaves out is
    gone: here also a mistyped one, which is why it is deprecated), and ``check`` says so."""
    deleted, sender = await new_chat(pool)
    sent = await send(pool, deleted, sender)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", deleted)
    mistyped = await _enqueue_message(pool, uuid4())
    manifest = edited(deleted_chats=None, chat_alive=CHAT_ALIVE)
    async with pool.acquire() as conn:
        results = {r.name: r for r in await check_manifest(conn, manifest)}
        await require_valid(conn, manifest, needs=("hub",))
        both = edited(chat_alive=CHAT_ALIVE)
        with pytest.raises(ConfigurationError, match="chat_alive: set beside deleted_chats"):
            await require_valid(conn, both, needs=())
    assert results["chat_alive"].ok
    assert results["chat_alive"].detail.startswith("deprecated: replace it with deleted_chats")
    assert results["deleted_chats"].detail.startswith("not set: ")
    stack = make_stack(pool, builder=builder_over(manifest))

    report = await stack.dispatcher.run_pass()

    assert (report.target_gone, report.quarantined) == (2, 0)
    for entry in (sent.outbox_id, mistyped):
        assert (await row(pool, entry))["last_error"].startswith("TargetGone:ChatGone")


async def test_deleted_chats_quarantines_the_chat_it_does_not_know_as_deleted(
    pool: asyncpg.Pool,
) -> None:
    """The same rows under deleted_chats on a soft-delete flag (here: a tombstone or a chat
    row marked deleted): the mistyped chat id is a defect, quarantined with the alert."""
    deleted, sender = await new_chat(pool)
    sent = await send(pool, deleted, sender)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", deleted)
    mistyped = await _enqueue_message(pool, uuid4())
    stack = make_stack(pool)  # the shipped manifest: deleted_chats over the tombstones

    report = await stack.dispatcher.run_pass()

    assert (report.target_gone, report.quarantined) == (1, 1)
    assert (await row(pool, sent.outbox_id))["status"] == "Done"
    assert (await row(pool, mistyped))["status"] == "Quarantined"
    assert [a.outbox_entry_id for a in stack.alerts.events] == [mistyped]


async def test_a_statement_error_names_the_server_message(pool: asyncpg.Pool) -> None:
    """A query that prepared at start but fails to run as written later (a table renamed under
    it): the row's reason names the error class, the SQLSTATE and the server's message."""
    chat, sender = await new_chat(pool)
    await send(pool, chat, sender)
    await _read_receipt(pool, chat, sender)
    await pool.execute("CREATE TABLE public.receipts_view AS SELECT * FROM messenger.participants")
    query = (
        "SELECT id, chat_id, user_id, last_read_seq, last_read_at FROM public.receipts_view"
        " WHERE id = ANY($1::uuid[])"
    )
    builder = builder_over(edited(read_receipts=query))
    await pool.execute("DROP TABLE public.receipts_view")
    stack = make_stack(pool, builder=builder, **SLOW_RETRY)

    await stack.dispatcher.run_pass()

    entry = await pool.fetchrow(
        "SELECT status, last_error FROM messenger.realtime_outbox WHERE kind = 'ReadReceiptUpdated'"
    )
    assert (entry["status"], entry["last_error"]) == (
        "Pending",
        "TransientError:QueryFailed: the read_receipts query failed (UndefinedTableError,"
        ' SQLSTATE 42P01: relation "public.receipts_view" does not exist)',
    )


async def test_outbox_ids_default_to_uuid7_and_other_versions_are_refused(
    pool: asyncpg.Pool,
) -> None:
    entry = await _enqueue_message(pool, uuid4())
    assert entry.version == 7
    with pytest.raises(asyncpg.CheckViolationError, match="ck_rto_id_uuid7"):
        await pool.execute(
            "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, message_id,"
            " seq) VALUES ($1, 'MessageReceived', 'ChatGroup', $2, $2, 1)",
            uuid4(),
            uuid4(),
        )


async def test_one_kind_reading_two_queries_keeps_each_failure_apart(pool: asyncpg.Pool) -> None:
    """CallInvited reads `calls` (Direct) or `conferences` (Conference): the failing `calls`
    query retries the Direct row only; the Conference invite of the same batch goes out."""
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="t", members=[bob])
        call = await calls.start_call(conn, caller=alice, callee=bob)
        conference = await conferences.start_conference(conn, chat_id=chat, actor=alice)
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    direct, group = [
        await pool.fetchval(
            "INSERT INTO messenger.realtime_outbox"
            " (kind, target_kind, chat_id, target_user_id, ref_id, session_kind)"
            " VALUES ('CallInvited', $1, $2, $3, $4, $5) RETURNING id",
            *values,
        )
        for values in (
            ("User", None, bob, call, "Direct"),
            ("ChatGroup", chat, None, conference, "Conference"),
        )
    ]
    stack = stack_failing_at_run_time(
        pool,
        "calls",
        "SELECT id, caller_user_id, callee_user_id, room_name, status, created_at, answered_at,"
        " ended_at, ended_by_user_id FROM messenger.call_sessions WHERE id = ANY($1::uuid[])",
        "messenger.call_sessions",
    )

    report = await stack.dispatcher.run_pass()

    assert (report.dispatched, report.retried) == (1, 1)
    assert [p.group for p in stack.publisher.pushes] == [f"chat:{chat}"]
    assert (await row(pool, group))["status"] == "Done"
    assert (await row(pool, direct))["last_error"] == (
        "TransientError:QueryFailed: the calls query failed (DivisionByZeroError, SQLSTATE 22012)"
    )


async def test_an_outbox_seq_off_the_message_is_warned_once_and_the_message_wins(
    pool: asyncpg.Pool,
) -> None:
    """The writer put another seq on the row than the message has: the push carries the
    message's, and one warning names the row, however often the row is built."""
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender)
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET seq = 99 WHERE id = $1", sent.outbox_id
    )
    failing = {"on": True}
    publisher = RecordingPublisher(
        fail=lambda _: HubUnavailable("down", code="Down") if failing["on"] else None
    )
    stack = make_stack(pool, publisher=publisher)
    with structlog.testing.capture_logs() as logs:
        assert (await stack.dispatcher.run_pass()).retried == 1
        failing["on"] = False
        await pool.execute(
            "UPDATE messenger.realtime_outbox SET next_attempt_at = now() WHERE id = $1",
            sent.outbox_id,
        )
        assert (await stack.dispatcher.run_pass()).dispatched == 1
    [push] = publisher.pushes
    assert push.payload["seq"] == 1
    warned = [entry for entry in logs if entry["event"] == "outbox_seq_mismatch"]
    assert warned == [
        {
            "event": "outbox_seq_mismatch",
            "log_level": "warning",
            "outbox_entry_id": str(sent.outbox_id),
            "kind": "MessageReceived",
            "outbox_seq": 99,
            "message_seq": 1,
        }
    ]
