"""Pipelined passes (the next claim runs while a batch is built and pushed): every row once, in
order, never claimed twice, and a stop gives back what was claimed ahead."""

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence

import asyncpg

from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.dispatch.dispatcher import PIPELINE_LANES
from tests.fakes import RecordingPublisher
from tests.integration.support import PIPELINED, backlog, make_stack


async def warm(pool: asyncpg.Pool, connections: int) -> None:
    """``connections`` idle connections in ``pool``."""
    held = [await pool.acquire() for _ in range(connections)]
    for conn in held:
        await pool.release(conn)


async def done_at_first_attempt(pool: asyncpg.Pool) -> int:
    """How many outbox rows are Done after one attempt."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Done' AND attempts = 1"
        )
    )


async def test_pipelined_pass_delivers_every_row_once_in_order(pool: asyncpg.Pool) -> None:
    await backlog(pool, chats=4, per_chat=150)
    await warm(pool, PIPELINE_LANES)  # the lanes are in by the second batch (see below)
    stack = make_stack(pool, PIPELINED)
    assert stack.dispatcher.pipelining
    report = await stack.dispatcher.run_pass()
    assert report.dispatched == 600
    assert report.pipelined >= 5  # the overlap really happened
    ids = Counter(p.payload["messageId"] for p in stack.publisher.pushes)
    assert len(ids) == 600
    assert set(ids.values()) == {1}
    seqs: dict[object, list[object]] = defaultdict(list)
    for push in stack.publisher.pushes:
        seqs[push.payload["chatId"]].append(push.payload["seq"])
    assert all(order == list(range(1, 151)) for order in seqs.values())
    assert await done_at_first_attempt(pool) == 600


async def test_two_pipelined_dispatchers_never_claim_the_same_row(pool: asyncpg.Pool) -> None:
    await backlog(pool, chats=4, per_chat=250)
    a, b = make_stack(pool, PIPELINED), make_stack(pool, PIPELINED)
    reports = await asyncio.gather(a.dispatcher.run_pass(), b.dispatcher.run_pass())
    assert sum(r.dispatched for r in reports) == 1000
    ids_a = [p.payload["messageId"] for p in a.publisher.pushes]
    ids_b = [p.payload["messageId"] for p in b.publisher.pushes]
    assert len(ids_a) + len(ids_b) == 1000
    assert not set(ids_a) & set(ids_b)
    assert await done_at_first_attempt(pool) == 1000


async def test_stop_releases_the_batch_claimed_ahead(pool: asyncpg.Pool) -> None:
    await backlog(pool, chats=2, per_chat=200)
    # The pass's extra lanes come from the pool in the background, and pipelining starts once
    # they are in: idle connections there make that the next batch, not a race against opening
    # two connections on a loaded machine (stopped at the third slice, the pass may not get to
    # pipeline at all).
    await warm(pool, PIPELINE_LANES)

    class StopAfterThreeSlices(RecordingPublisher):
        async def publish(
            self,
            pushes: Sequence[Push],
            *,
            deadline: float | None = None,
            marks: Sequence[str] = (),
        ) -> Sequence[PublishResult]:
            results = await super().publish(pushes, deadline=deadline, marks=marks)
            if self.calls == 3:
                stack.dispatcher.request_stop()
            return results

    stack = make_stack(pool, PIPELINED, publisher=StopAfterThreeSlices())
    report = await stack.dispatcher.run_pass()
    assert report.stopped
    assert report.pipelined >= 1
    rows = await pool.fetch("SELECT status, attempts FROM messenger.realtime_outbox")
    done = [r for r in rows if r["status"] == "Done"]
    pending = [r for r in rows if r["status"] == "Pending"]
    assert len(done) == report.dispatched == len(stack.publisher.pushes)
    assert len(done) + len(pending) == 400
    # Nothing was left claimed: every row not delivered is due again with its attempt undone.
    assert all(r["attempts"] == 0 for r in pending)
    rest = make_stack(pool, PIPELINED)
    assert (await rest.dispatcher.run_pass()).dispatched == len(pending)
    pushed = Counter(p.payload["messageId"] for p in stack.publisher.pushes + rest.publisher.pushes)
    assert len(pushed) == 400
    assert set(pushed.values()) == {1}
