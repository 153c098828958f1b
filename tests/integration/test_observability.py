"""Spans per pass and per row, and log lines that never carry a message body."""

import asyncio
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from realtime_dispatch.errors import HubUnavailable, PushRejected, RealtimeDispatchError
from realtime_dispatch.messenger import calls
from tests.fakes import RecordingPublisher
from tests.integration.support import make_stack, new_chat, send

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)  # once per process; the dispatcher's tracer is a proxy
    return _exporter


def first_attempt_line(event: str, level: str, sent: Any, error_code: str) -> dict[str, object]:
    """The log line of a message's row that failed its first attempt with ``error_code``."""
    return {
        "event": event,
        "log_level": level,
        "entry_id": str(sent.outbox_id),
        "kind": "MessageReceived",
        "attempts": 1,
        "error_code": error_code,
    }


async def three_sent(pool: asyncpg.Pool, body: str) -> UUID:
    """Three messages sent in a new chat, its id: ``body`` followed by 0, 1 and 2."""
    chat, sender = await new_chat(pool)
    for i in range(3):
        await send(pool, chat, sender, f"{body}{i}")
    return chat


async def test_one_span_per_pass_and_per_row(
    pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    chat = await three_sent(pool, "secret body ")
    await make_stack(pool).dispatcher.run_pass()
    finished = spans.get_finished_spans()
    passes = [s for s in finished if s.name == "realtime_dispatch.pass"]
    rows = [s for s in finished if s.name == "realtime_dispatch.row"]
    assert len(passes) == 1
    assert passes[0].attributes is not None
    assert passes[0].attributes["realtime.dispatched"] == 3
    assert len(rows) == 3
    for span in rows:
        assert span.attributes is not None
        assert span.attributes["realtime.kind"] == "MessageReceived"
        assert span.attributes["realtime.chat_id"] == str(chat)
        assert span.attributes["realtime.verdict"] == "done"
        assert span.parent is not None
        assert span.parent.span_id == passes[0].context.span_id
        assert not any("secret" in str(v) for v in span.attributes.values())
    # Each row span joins the owner's write: its reference, message and creation time.
    written = {
        str(r["id"]): r
        for r in await pool.fetch(
            "SELECT id, ref_id, message_id, created_at FROM messenger.realtime_outbox"
            " WHERE chat_id = $1",
            chat,
        )
    }
    for span in rows:
        assert span.attributes is not None
        row = written[str(span.attributes["realtime.outbox_id"])]
        assert row["message_id"] is not None
        assert span.attributes["realtime.message_id"] == str(row["message_id"])
        assert span.attributes.get("realtime.ref_id") == (
            str(row["ref_id"]) if row["ref_id"] is not None else None
        )
        assert span.attributes["realtime.created_at"] == row["created_at"].isoformat()


async def test_logs_carry_ids_and_codes_never_bodies(pool: asyncpg.Pool) -> None:
    chat, sender = await new_chat(pool)
    await send(pool, chat, sender, "top secret body")
    await send(pool, chat, sender, "another secret body")
    flaky = RecordingPublisher(
        fail=lambda p: HubUnavailable("down") if p.payload["seq"] == 2 else None
    )
    with structlog.testing.capture_logs() as logs:
        await make_stack(pool, publisher=flaky).dispatcher.run_pass()
    events = [entry["event"] for entry in logs]
    assert "dispatched" in events
    assert "dispatch_retry" in events
    assert "job_completed" in events
    retry = next(e for e in logs if e["event"] == "dispatch_retry")
    assert retry["error_code"] == "HubUnavailable"
    assert retry["attempts"] == 1
    assert "secret" not in repr(logs)


def pushes_with(fates: dict[int, RealtimeDispatchError]) -> RecordingPublisher:
    """Fails the pushes of the given seqs with the given errors, delivers the rest."""
    return RecordingPublisher(fail=lambda p: fates.get(int(str(p.payload["seq"]))))


async def test_job_run_id_on_the_pass_span_and_every_log_line_of_the_pass(
    pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    await three_sent(pool, "m")
    publisher = pushes_with({2: HubUnavailable("down"), 3: PushRejected("no")})
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        await make_stack(pool, publisher=publisher).dispatcher.run_pass()
    (pass_span,) = [s for s in spans.get_finished_spans() if s.name == "realtime_dispatch.pass"]
    assert pass_span.attributes is not None
    job_run_id = pass_span.attributes["realtime.job_run_id"]
    assert len(logs) >= 4  # batch claimed, dispatched, retry, quarantined, job completed, ...
    assert {entry.get("job_run_id") for entry in logs} == {job_run_id}
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as later:
        structlog.get_logger("test").info("after the pass")
    assert "job_run_id" not in later[0]


async def test_the_row_span_covers_build_and_push(
    pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    chat, sender = await new_chat(pool)
    await send(pool, chat, sender)
    slow = RecordingPublisher()

    async def publish(pushes, **_):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.2)
        return [None] * len(pushes)

    slow.publish = publish  # type: ignore[method-assign]
    await make_stack(pool, publisher=slow).dispatcher.run_pass()
    (row_span,) = [s for s in spans.get_finished_spans() if s.name == "realtime_dispatch.row"]
    assert row_span.start_time is not None
    assert row_span.end_time is not None
    assert row_span.end_time - row_span.start_time >= 200_000_000  # the push's 0.2 s inside


async def test_per_row_retry_and_quarantine_lines_at_the_default_level(
    pool: asyncpg.Pool,
) -> None:
    """The spec's per-row events for rows that did not go out: ``dispatch_retry`` (entry id,
    attempts, error code) and ``quarantined`` (entry id, kind), at info and warning, so the
    default level shows them; ``dispatched`` and ``batch_claimed`` per row stay at debug (the
    documented deviation); the pass summary sums them all."""
    chat, sender = await new_chat(pool)
    sent = [await send(pool, chat, sender, f"secret {i}") for i in range(4)]
    publisher = pushes_with({2: HubUnavailable("down"), 3: PushRejected("no", code="Http400")})
    stack = make_stack(pool, publisher=publisher, backoff_base=5.0, backoff_cap=10.0)
    with structlog.testing.capture_logs() as logs:
        await stack.dispatcher.run_pass()
    loud = [e for e in logs if e["log_level"] not in ("debug",)]
    assert [e["event"] for e in loud] == ["dispatch_retry", "quarantined", "job_completed"], loud
    retry, quarantined, summary = loud
    assert retry == first_attempt_line("dispatch_retry", "info", sent[1], "HubUnavailable")
    assert quarantined == first_attempt_line("quarantined", "warning", sent[2], "Http400")
    quiet = {e["event"] for e in logs if e["log_level"] == "debug"}
    assert {"dispatched", "batch_claimed"} <= quiet
    assert summary["log_level"] == "info"
    assert (summary["claimed"], summary["dispatched"], summary["retried"]) == (4, 2, 1)
    assert summary["quarantined"] == 1
    assert summary["error_codes"] == {"HubUnavailable": 1, "Http400": 1}
    assert "secret" not in repr(logs)


async def test_a_row_span_carries_the_rows_reference(
    pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    """A row with a ``ref_id`` (a call's) and no message: the span names the call and the
    row's creation, no message id."""
    spans.clear()
    async with pool.acquire() as conn:
        call = await calls.start_call(conn, caller=uuid4(), callee=uuid4())
    await make_stack(pool).dispatcher.run_pass()
    rows = [
        s
        for s in spans.get_finished_spans()
        if s.name == "realtime_dispatch.row"
        and s.attributes is not None
        and s.attributes.get("realtime.ref_id") == str(call)
    ]
    assert len(rows) == 2  # to both parties
    created = await pool.fetchval(
        "SELECT min(created_at) FROM messenger.realtime_outbox WHERE ref_id = $1", call
    )
    for span in rows:
        assert span.attributes is not None
        assert span.attributes["realtime.kind"] == "CallInvited"
        assert "realtime.message_id" not in span.attributes
        assert span.attributes["realtime.created_at"] == created.isoformat()
