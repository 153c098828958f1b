"""Membership marks against the real PostgreSQL and Redis: a runner's batches carry the marks
its own connection heard since the last membership change (none from before it), a
hub skips its barrier only for a mark its feed has applied, and the backplane never joins
messages with different marks into one delivery."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from uuid import uuid4

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.delivery.marks import barrier_payload, new_token
from realtime_dispatch.delivery.push import BATCH_PATH, PublishResult, Push
from realtime_dispatch.dispatch.dispatcher import Dispatcher
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.dispatch.service import dispatch_service
from realtime_dispatch.hub.backplane.subscriber import (
    BackplaneSubscriber,
    batch_channel,
    encode_batch,
)
from realtime_dispatch.hub.backplane.subscriber import redis_client as backplane_client
from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.messenger import commands
from realtime_dispatch.outbox.store import OutboxStore
from support.hub_wire import SERVICE_KEY, make_token
from support.procs import free_port, wait_until
from tests.fakes import RecordingAlerts, RecordingPublisher
from tests.hub_fixtures import hub_settings, raw_client, running_hub
from tests.integration.support import FAST, new_chat, send

BARRIERS = "messenger_realtime_hub_membership_barriers_total"


class MarkRecorder(RecordingPublisher):
    """Records, with every push, the membership marks in effect when it was published."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[Push, tuple[str, ...]]] = []

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        self.marks += [(push, tuple(marks)) for push in pushes]
        return await super().publish(pushes, deadline=deadline, marks=marks)

    def marks_of(self, chat: object, target: str) -> list[tuple[str, ...]]:
        return [
            tokens
            for push, tokens in self.marks
            if push.group == chat_group(chat) and push.target == target  # type: ignore[arg-type]
        ]


async def test_a_runner_marks_its_batches_but_never_with_a_token_from_before_a_change(
    database_url: str, pool: asyncpg.Pool
) -> None:
    publisher = MarkRecorder()
    async with dispatch_service(database_url, FAST, publisher, membership_marks=True) as service:
        keeper = service.runner.marks
        assert keeper is not None
        await wait_until(lambda: keeper.mark.tokens, within=5)
        heard_payloads: list[str] = []
        notified = keeper.mark.notified

        def record(payload: str) -> None:
            heard_payloads.append(payload)
            notified(payload)

        keeper.mark.notified = record  # type: ignore[method-assign]
        chat, sender = await new_chat(pool)
        # The chat's creation is a membership change too: wait until the runner heard it, and
        # a token after it.
        await wait_until(lambda: any(str(chat) in payload for payload in heard_payloads))
        await wait_until(lambda: keeper.mark.tokens, within=5)
        heard = keeper.mark.tokens
        await send(pool, chat, sender)
        await wait_until(lambda: publisher.marks_of(chat, "message_received"))
        [tokens] = publisher.marks_of(chat, "message_received")
        assert tokens
        assert set(tokens) <= {*heard, *keeper.mark.tokens}

        # The change and its event commit together: the claim that finds the event has heard
        # the change, so no token heard before it may vouch for the batch. It goes without a
        # mark (the hubs use their barrier), or with one the runner heard after the change
        # (sent because the change dropped the old ones, and it can win the race).
        member = uuid4()
        before = len(publisher.marks_of(chat, "chat_updated"))
        old = {*tokens, *keeper.mark.tokens}
        async with pool.acquire() as conn:
            await commands.set_participant(conn, chat_id=chat, user_id=member, active=True)
        await wait_until(lambda: len(publisher.marks_of(chat, "chat_updated")) > before)
        assert not set(publisher.marks_of(chat, "chat_updated")[-1]) & old
        # ... and a new mark follows within MIN_INTERVAL or so.
        await wait_until(lambda: keeper.mark.tokens, within=5)
        assert not set(keeper.mark.tokens) & old
        await send(pool, chat, sender)
        await wait_until(lambda: len(publisher.marks_of(chat, "message_received")) == 2)
        assert publisher.marks_of(chat, "message_received")[-1]


async def test_without_marks_a_runner_publishes_none(database_url: str, pool: asyncpg.Pool) -> None:
    publisher = MarkRecorder()
    async with dispatch_service(database_url, FAST, publisher) as service:
        assert service.runner.marks is None
        chat, sender = await new_chat(pool)
        await send(pool, chat, sender)
        await wait_until(lambda: publisher.marks_of(chat, "message_received"))
        assert publisher.marks_of(chat, "message_received") == [()]


async def test_claims_on_the_runners_own_session_skip_the_pooled_claim_settings(
    pool: asyncpg.Pool,
) -> None:
    """Behind a transaction pooler a claim first applies the planner settings (``SET LOCAL``);
    a runner that claims on its own session (marks on) set them at connect and skips that."""
    failing = "SELECT 1 / 0"  # stands in for the SET LOCAL batch: it shows whether it ran
    store = OutboxStore(pool, FAST.backoff, claim_settings=failing)
    chat, sender = await new_chat(pool)
    await send(pool, chat, sender)
    with pytest.raises(asyncpg.DivisionByZeroError):
        await store.claim(10)
    publisher = RecordingPublisher()
    dispatcher = Dispatcher(
        store=store,
        builder=default_payload_builder(),
        publisher=publisher,
        options=FAST,
        metrics=DispatchMetrics(CollectorRegistry()),
        alerts=RecordingAlerts(),
    )
    async with pool.acquire() as conn:
        report = await dispatcher.run_pass(claim_conn=conn)
        assert report.claimed >= 1
        assert [p for p in publisher.pushes if p.group == chat_group(chat)]
        await send(pool, chat, sender)
        rows = await store.claim(10, conn=conn, session=True)
        assert chat in [r.chat_id for r in rows]
        assert await store.release(rows, conn=conn) == len(rows)


async def test_a_hub_skips_its_barrier_only_for_a_mark_its_feed_applied(
    pool: asyncpg.Pool, start_hub
) -> None:
    bob = uuid4()
    chat, _ = await new_chat(pool, bob)
    group = chat_group(chat)
    async with (
        start_hub() as running,
        raw_client(running, make_token(bob)) as client,
    ):
        hub = running.hub
        registry = hub.metrics_registry

        def barriers(kind: str) -> float:
            return registry.get_sample_value(BARRIERS, {"kind": kind}) or 0.0

        async def deliver(n: int, marks: Sequence[str]) -> None:
            frame = b'{"type":1,"target":"t","arguments":[%d]}\x1e' % n
            assert await hub.deliver([(group, frame)], marks)
            [record] = await client.invocations(1)
            assert record["arguments"] == [n]

        unheard = new_token()
        await deliver(1, [unheard])
        assert (barriers("marked"), barriers("round_trip")) == (0, 1)

        token = new_token()
        await pool.execute("SELECT pg_notify($1, $2)", MEMBERSHIP_CHANNEL, barrier_payload(token))
        await wait_until(lambda: hub.membership.heard([token]))
        await deliver(2, [unheard, token])
        assert (barriers("marked"), barriers("round_trip")) == (1, 1)

        await deliver(3, [])  # no marks (an older worker, or a change before the rows)
        assert (barriers("marked"), barriers("round_trip")) == (1, 2)

        await hub.deliver([(f"user:{bob}", b'{"type":1,"target":"u","arguments":[]}\x1e')])
        assert (await client.invocations(1))[0]["target"] == "u"
        assert (barriers("marked"), barriers("round_trip")) == (1, 2)  # no chat: no barrier


async def test_the_backplane_delivers_messages_with_different_marks_apart(redis_url: str) -> None:
    channel = f"realtime-dispatch:test:{free_port()}"
    delivered: list[tuple[list[tuple[str, bytes]], list[str]]] = []

    async def deliver(items: Sequence[tuple[str, bytes]], marks: Sequence[str]) -> None:
        delivered.append((list(items), list(marks)))

    replica = BackplaneSubscriber(redis_url, deliver, channel=channel)
    task = asyncio.create_task(replica.run())
    client = backplane_client(redis_url)
    messages = [
        ([("chat:a", b"1")], ["m1"]),
        ([("chat:a", b"2")], ["m1"]),
        ([("chat:b", b"3")], ["m2"]),
        ([("chat:b", b"4")], []),
    ]
    try:
        await asyncio.wait_for(replica.ready.wait(), 10)
        async with client.pipeline(transaction=False) as pipe:
            for items, marks in messages:
                pipe.publish(batch_channel(channel), encode_batch(items, marks))
            await pipe.execute()
        await wait_until(lambda: sum(len(items) for items, _ in delivered) == 4)
        for items, marks in delivered:
            for item in items:
                assert [m for i, m in messages if i == [item]] == [marks], delivered
        assert [item for items, _ in delivered for item in items] == [
            item for items, _ in messages for item in items
        ]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "asgi"])
async def test_a_worker_pushing_over_http_hands_its_marks_to_the_hub(
    database_url: str, pool: asyncpg.Pool, direct: bool
) -> None:
    """A worker in another process (the HTTP publisher, marks on as ``realtime-dispatch worker``
    runs it) sends its runner's marks in the batch's body: the hub, which heard them, passes
    its barrier without a round trip, and the member gets every message."""
    bob = uuid4()
    chat, sender = await new_chat(pool, bob)
    async with (
        running_hub(hub_settings(), dsn=database_url, pool=pool, direct=direct) as running,
        raw_client(running, make_token(bob)) as client,
    ):
        registry = running.hub.metrics_registry

        def barriers(kind: str) -> float:
            return registry.get_sample_value(BARRIERS, {"kind": kind}) or 0.0

        publisher = HttpHubPublisher(running.http_url, SERVICE_KEY)
        async with dispatch_service(
            database_url, FAST, publisher, membership_marks=True
        ) as service:
            keeper = service.runner.marks
            assert keeper is not None
            # Once the runner holds a mark the hub heard, its batches need no round trip.
            await wait_until(
                lambda: keeper.mark.tokens and running.hub.membership.heard(keeper.mark.tokens),
                within=10,
            )
            waited = barriers("round_trip")
            for n in range(3):
                await send(pool, chat, sender, body=f"m{n}")
                [record] = await client.invocations(1)
                assert record["target"] == "message_received"
                assert record["arguments"][0]["body"] == f"m{n}"
        await publisher.aclose()
        assert barriers("marked") >= 3
        assert barriers("round_trip") == waited


async def test_a_batchs_marks_are_checked_and_an_unheard_one_costs_the_barrier(
    database_url: str, pool: asyncpg.Pool
) -> None:
    bob = uuid4()
    chat, _ = await new_chat(pool, bob)
    push = {"group": chat_group(chat), "target": "t", "arguments": []}
    async with (
        running_hub(hub_settings(), dsn=database_url, pool=pool, direct=True) as running,
        raw_client(running, make_token(bob)) as client,
        httpx.AsyncClient(
            base_url=running.http_url, headers={"Authorization": f"Bearer {SERVICE_KEY}"}
        ) as http,
    ):
        registry = running.hub.metrics_registry

        def barriers(kind: str) -> float:
            return registry.get_sample_value(BARRIERS, {"kind": kind}) or 0.0

        for marks in ("m1", ["m" * 65], [1], [""], ["m"] * 9):
            bad = await http.post(BATCH_PATH, json={"pushes": [push], "marks": marks})
            assert bad.status_code == 400, marks
            assert bad.json()["code"] == "InvalidMarks"
        await client.assert_silent(0.1)  # refused whole: nothing went out

        answer = await http.post(BATCH_PATH, json={"pushes": [push], "marks": [new_token()]})
        assert answer.json() == {"results": [{"status": 202}]}
        assert len(await client.invocations(1)) == 1
        assert (barriers("marked"), barriers("round_trip")) == (0, 1)

        token = new_token()
        await pool.execute("SELECT pg_notify($1, $2)", MEMBERSHIP_CHANNEL, barrier_payload(token))
        await wait_until(lambda: running.hub.membership.heard([token]))
        answer = await http.post(BATCH_PATH, json={"pushes": [push, push], "marks": [token]})
        assert answer.json() == {"results": [{"status": 202}] * 2}
        assert len(await client.invocations(2)) == 2
        assert (barriers("marked"), barriers("round_trip")) == (1, 1)
