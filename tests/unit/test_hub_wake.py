"""The hub writer's wake-up (``hub.connections.connection.Wake``): what it keeps of
asyncio.Event."""

from __future__ import annotations

import asyncio

import pytest

from realtime_dispatch.hub.connections.connection import Wake


async def test_a_set_wake_does_not_wait() -> None:
    wake = Wake()
    wake.set()
    await asyncio.wait_for(wake.wait(), 0.1)
    assert wake.is_set()


async def test_a_waiting_writer_is_woken_by_set_and_clear_rearms() -> None:
    wake = Wake()
    waiter = asyncio.ensure_future(wake.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    wake.set()
    await asyncio.wait_for(waiter, 0.1)
    wake.clear()
    assert not wake.is_set()
    again = asyncio.ensure_future(wake.wait())
    await asyncio.sleep(0.01)
    assert not again.done()
    wake.set()
    await asyncio.wait_for(again, 0.1)


async def test_a_cancelled_wait_leaves_the_wake_usable() -> None:
    wake = Wake()
    waiter = asyncio.ensure_future(wake.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    wake.set()  # no waiter left behind to resolve
    await asyncio.wait_for(wake.wait(), 0.1)
