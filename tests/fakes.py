"""Test doubles at the boundary the dispatcher issue names: the hub publisher."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.errors import RealtimeDispatchError


class RecordingPublisher:
    """Records every push; ``fail`` decides a per-push error (None = delivered)."""

    def __init__(
        self, fail: Callable[[Push], RealtimeDispatchError | None] = lambda _: None
    ) -> None:
        self.pushes: list[Push] = []
        self.calls = 0
        self.fail = fail
        self.pushed = asyncio.Event()
        self.called = asyncio.Event()
        self.gate: asyncio.Event | None = None  # when set, publish waits on it

    async def publish(
        self, pushes: Sequence[Push], *, deadline: float | None = None, marks: Sequence[str] = ()
    ) -> Sequence[PublishResult]:
        self.calls += 1
        self.called.set()
        if self.gate is not None:
            await self.gate.wait()
        results = [self.fail(p) for p in pushes]
        self.pushes.extend(p for p, r in zip(pushes, results, strict=True) if r is None)
        self.pushed.set()
        return results

    async def aclose(self) -> None:
        return None


class RecordingAlerts:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def quarantined(self, event: object) -> None:
        self.events.append(event)
