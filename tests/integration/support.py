"""Helpers for dispatcher tests: build the real stack around a recording publisher."""

from __future__ import annotations

from dataclasses import dataclass, replace
from uuid import UUID, uuid4

import asyncpg
from prometheus_client import CollectorRegistry

from realtime_dispatch.dispatch.dispatcher import Dispatcher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.projections.builder import PayloadBuilder
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger import commands
from realtime_dispatch.outbox.store import OutboxStore
from realtime_dispatch.values.ids import new_id
from support.procs import wait_until
from tests.fakes import RecordingAlerts, RecordingPublisher

FAST = RealtimeDispatchOptions(
    polling_interval=0.2, backoff_base=0.05, backoff_cap=0.2, max_run_duration=2, lock_ttl=10
)


@dataclass
class Stack:
    dispatcher: Dispatcher
    publisher: RecordingPublisher
    alerts: RecordingAlerts
    metrics: DispatchMetrics
    store: OutboxStore

    def counter(self, name: str, kind: str = "MessageReceived") -> float:
        value = self.metrics.registry.get_sample_value(f"{name}_total", {"kind": kind})
        return value or 0.0


def make_stack(
    pool: asyncpg.Pool,
    options: RealtimeDispatchOptions = FAST,
    publisher: RecordingPublisher | None = None,
    *,
    builder: PayloadBuilder | None = None,
    **changes: object,
) -> Stack:
    options = replace(options, **changes)  # type: ignore[arg-type]
    publisher = publisher or RecordingPublisher()
    alerts = RecordingAlerts()
    metrics = DispatchMetrics(CollectorRegistry())
    store = OutboxStore(pool, options.backoff)
    dispatcher = Dispatcher(
        store=store,
        builder=builder or default_payload_builder(),
        publisher=publisher,
        options=options,
        metrics=metrics,
        alerts=alerts,
    )
    return Stack(dispatcher, publisher, alerts, metrics, store)


async def new_chat(pool: asyncpg.Pool, *members: UUID) -> tuple[UUID, UUID]:
    """A chat with a fresh sender plus ``members``; returns (chat_id, sender). The creation's
    push (its ``chat_updated`` row) is deleted, as if delivered and purged before the test
    begins: the tests that take a chat from here count their own rows, statuses and pushes
    (the creation's push is tested in ``test_messenger_commands.py`` and
    ``test_chat_created_push.py``)."""
    sender = uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=sender, title="t", members=members)
        purged = await conn.execute(
            "DELETE FROM messenger.realtime_outbox WHERE chat_id = $1 AND kind = 'ChatUpdated'",
            chat,
        )
        assert purged == "DELETE 1", purged
    return chat, sender


async def send(
    pool: asyncpg.Pool, chat: UUID, sender: UUID, body: str = "hi"
) -> commands.SentMessage:
    async with pool.acquire() as conn:
        return await commands.send_message(conn, chat_id=chat, sender=sender, body=body)


async def row(pool: asyncpg.Pool, entry_id: UUID) -> asyncpg.Record:
    record = await pool.fetchrow("SELECT * FROM messenger.realtime_outbox WHERE id = $1", entry_id)
    assert record is not None
    return record


async def wait_done(pool: asyncpg.Pool, entry_id: UUID, within: float = 30) -> None:
    """Until the outbox row ``entry_id`` is ``Done``."""

    async def done() -> bool:
        return bool((await row(pool, entry_id))["status"] == "Done")

    await wait_until(done, within=within)


async def make_due(pool: asyncpg.Pool) -> None:
    await pool.execute(
        "UPDATE messenger.realtime_outbox SET next_attempt_at = now() WHERE status = 'Pending'"
    )


# The default backoffs (2 s first retry) switch pipelining on; the tests' FAST options do not.
PIPELINED = RealtimeDispatchOptions(batch_size=50, max_run_duration=20, lock_ttl=30)


async def backlog(pool: asyncpg.Pool, chats: int, per_chat: int) -> None:
    """``chats`` chats of ``per_chat`` messages, each with its outbox row, inserted chat by chat
    with UUIDv7 ids: outbox id order is seq order within a chat."""
    for _ in range(chats):
        chat, sender = await new_chat(pool)
        messages = [(new_id(), chat, seq, sender, f"m{seq}") for seq in range(1, per_chat + 1)]
        async with pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                "INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)"
                " VALUES ($1, $2, $3, $4, $5)",
                messages,
            )
            await conn.executemany(
                "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id,"
                " message_id, seq) VALUES ($1, 'MessageReceived', 'ChatGroup', $2, $3, $4)",
                [(new_id(), chat, message_id, seq) for message_id, _, seq, _, _ in messages],
            )


async def table_texts(pool: asyncpg.Pool) -> dict[str, str]:
    tables = await pool.fetch(
        "SELECT table_schema, table_name FROM information_schema.tables"
        " WHERE table_type = 'BASE TABLE'"
        " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
    )
    texts = {}
    for t in tables:
        name = f'"{t["table_schema"]}"."{t["table_name"]}"'
        rows = await pool.fetch(f"SELECT x::text AS row FROM {name} AS x")
        texts[name] = "\n".join(r["row"] for r in rows)
    return texts
