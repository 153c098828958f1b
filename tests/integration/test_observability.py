"""Spans per pass and per row, and log lines that never carry a message body."""

import asyncpg
import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from realtime_dispatch.errors import HubUnavailable
from tests.fakes import RecordingPublisher
from tests.integration.support import make_stack, new_chat, send

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)  # once per process; the dispatcher's tracer is a proxy
    return _exporter


async def test_one_span_per_pass_and_per_row(
    pool: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    chat, sender = await new_chat(pool)
    for i in range(3):
        await send(pool, chat, sender, f"secret body {i}")
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
