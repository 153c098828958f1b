"""Slow pushes never hold back the outcomes of the slices pushed before them: while a slice is
being pushed, the earlier slices' rows are Done (written once they waited ``OUTCOME_DELAY``),
in a sequential pass and in a pipelined one."""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import asyncpg
import pytest

from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.dispatch.dispatcher import PUSH_SLICE
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from tests.integration.support import FAST, PIPELINED, backlog, make_stack

PIPELINED_TWO_SLICES = replace(PIPELINED, batch_size=2 * PUSH_SLICE)

WAIT_AT_MOST = 10.0  # seconds a slow push waits for the earlier outcomes before giving up


class SlowPublisher:
    """A hub that is slow while the earlier slices' rows are not Done yet: each push waits for
    them (at most WAIT_AT_MOST), noting whether they were written meanwhile."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.earlier: list[str] = []
        self.written_meanwhile: list[bool] = []

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        if self.earlier:
            self.written_meanwhile.append(await self._earlier_done())
        self.earlier.extend(str(p.payload["eventId"]) for p in pushes)
        return [None] * len(pushes)

    async def _earlier_done(self) -> bool:
        ids = list(self.earlier)
        give_up = time.monotonic() + WAIT_AT_MOST
        while time.monotonic() < give_up:
            pending = await self.pool.fetchval(
                "SELECT count(*) FROM messenger.realtime_outbox"
                " WHERE id = ANY($1::uuid[]) AND status <> 'Done'",
                ids,
            )
            if pending == 0:
                return True
            await asyncio.sleep(0.01)
        return False

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("options", "rows", "pipelined"),
    [
        (FAST, 4 * PUSH_SLICE, False),  # one batch of four slices
        (PIPELINED_TWO_SLICES, 5 * PUSH_SLICE, True),  # full batches of two slices, pipelined
    ],
)
async def test_earlier_slices_are_written_while_a_slow_slice_pushes(
    pool: asyncpg.Pool, options: RealtimeDispatchOptions, rows: int, pipelined: bool
) -> None:
    await backlog(pool, chats=5, per_chat=rows // 5)
    publisher = SlowPublisher(pool)
    stack = make_stack(pool, options, publisher)  # type: ignore[arg-type]
    report = await stack.dispatcher.run_pass()
    assert report.dispatched == rows
    assert (report.pipelined > 0) is pipelined
    assert len(publisher.written_meanwhile) == rows // PUSH_SLICE - 1
    assert all(publisher.written_meanwhile), publisher.written_meanwhile
