"""The full collection after connections end (:mod:`realtime_dispatch.edge.gc_sweep`)."""

import asyncio
import contextlib
import gc
import weakref
from collections.abc import AsyncIterator

import pytest

from realtime_dispatch.edge.gc_sweep import MAX_CPU_SHARE, GarbageSweep, rest_after
from support.procs import wait_until


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def garbage_cycle() -> weakref.ref[Node]:
    """Two objects in a reference cycle, unreachable: only the cyclic GC frees them."""
    one, two = Node(), Node()
    one.other, two.other = two, one
    return weakref.ref(one)


@contextlib.asynccontextmanager
async def sweeping(sweep: GarbageSweep) -> AsyncIterator[None]:
    task = asyncio.create_task(sweep.run())
    gc.disable()  # only the sweep collects meanwhile
    try:
        yield
    finally:
        gc.enable()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_connection_end_frees_cycles_after_the_delay() -> None:
    sweep = GarbageSweep(delay=0.05)
    async with sweeping(sweep):
        cycle = garbage_cycle()
        sweep.ended()
        sweep.ended()
        await wait_until(lambda: cycle() is None, within=5)
        assert sweep.sweeps == 1  # two ends, one collection
        assert sweep.ends == 0


async def test_no_end_no_collection() -> None:
    sweep = GarbageSweep(delay=0.01)
    async with sweeping(sweep):
        cycle = garbage_cycle()
        await asyncio.sleep(0.1)
        assert sweep.sweeps == 0
        assert cycle() is not None


def test_costly_collections_are_spaced_to_their_share() -> None:
    assert MAX_CPU_SHARE == 0.01
    assert rest_after(0.008, 5.0) == 0.0  # 8 ms: every 5 s is under 1 %
    assert rest_after(0.06, 5.0) == 1.0  # 60 ms: every 6 s
    assert rest_after(0.3, 5.0) == 25.0  # 300 ms: every 30 s
    assert rest_after(0.3, 5.0, share=0.05) == pytest.approx(1.0)  # a larger share: every 6 s
