"""A media job's rest between full batches (:meth:`JobRun.rest`): the batch's own time, times
the pause factor; a stop ends it at once."""

from __future__ import annotations

import asyncio
import time

from realtime_dispatch.messenger.jobs.scheduled import JobRun


def run_with(pause: float) -> JobRun:
    return JobRun(deadline=time.monotonic() + 60, stop=asyncio.Event(), pause=pause)


async def test_a_rest_lasts_the_batch_time_times_the_factor() -> None:
    run = run_with(2.0)
    batch_started = time.monotonic() - 0.05  # a batch of 50 ms
    before = time.monotonic()
    await run.rest(batch_started)
    assert time.monotonic() - before >= 0.095


async def test_no_factor_no_rest() -> None:
    run = run_with(0.0)
    rested = asyncio.create_task(run.rest(time.monotonic() - 100))
    await asyncio.sleep(0)
    assert rested.done()


async def test_a_stop_ends_the_rest() -> None:
    run = run_with(1000.0)
    rested = asyncio.create_task(run.rest(time.monotonic() - 1))  # a 1,000 s rest
    await asyncio.sleep(0.01)
    assert not rested.done()
    run.stop.set()
    await asyncio.wait_for(rested, 5)


async def test_a_run_already_stopping_does_not_rest() -> None:
    run = run_with(1000.0)
    run.stop.set()
    await asyncio.wait_for(run.rest(time.monotonic() - 1), 1)
