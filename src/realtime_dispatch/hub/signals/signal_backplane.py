"""Ephemeral signals over the backplane: :class:`SignalRelay` publishes what one replica's
``Typing`` fanned out locally, for the members connected to the other replicas.

* ``redis``: the signals a tick gathered go as one format-2 message on the batch channel every
  replica reads (:mod:`.backplane`), their entries' frames being envelopes
  (:mod:`.signal_envelope`).
* ``redis-cluster``: one ``SPUBLISH`` per signal on its group's sharded channel, so it reaches
  the replicas with members of the chat and no other: the interest routing of pushes.

A signal is best effort: the queue is bounded (past it signals are dropped and counted), and a
Redis error drops what was being sent (a "typing" hint is worthless a few seconds later). The
relay owns its client; it is also the presence store's (:mod:`.presence_store`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import RedisCluster

from realtime_dispatch.hub.backplane.sharded import REDIS_ERRORS, cluster_client, group_channel
from realtime_dispatch.hub.backplane.subscriber import (
    CHANNEL,
    batch_channel,
    encode_batch,
    redis_client,
)

log = structlog.get_logger(__name__)

MAX_QUEUE = 10_000
"""Signals waiting to be published; past it new ones are dropped."""
MAX_MESSAGE = 256
"""Signals per backplane message (``redis``) or per pipeline (``redis-cluster``)."""


class SignalRelay:
    def __init__(
        self,
        url: str,
        *,
        sharded: bool,
        on_dropped: Callable[[int], None] = lambda _count: None,
    ) -> None:
        self.sharded = sharded
        self.client: aioredis.Redis | RedisCluster = (
            cluster_client(url) if sharded else redis_client(url)
        )
        self._channel = batch_channel(CHANNEL)
        self._queue: list[tuple[str, bytes]] = []
        self._wake = asyncio.Event()
        self._on_dropped = on_dropped

    def send(self, group: str, envelope: bytes) -> None:
        if len(self._queue) >= MAX_QUEUE:
            self._on_dropped(1)
            return
        self._queue.append((group, envelope))
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = self._queue[:MAX_MESSAGE]
                del self._queue[:MAX_MESSAGE]
                try:
                    await self._publish(batch)
                except REDIS_ERRORS as exc:
                    self._on_dropped(len(batch))
                    log.warning("hub_signals_dropped", error=type(exc).__name__, count=len(batch))

    async def _publish(self, batch: list[tuple[str, bytes]]) -> None:
        if isinstance(self.client, RedisCluster):
            async with self.client.pipeline(transaction=False) as pipe:
                for group, envelope in batch:
                    pipe.spublish(group_channel(group), envelope)
                await pipe.execute()
        else:
            await self.client.publish(self._channel, encode_batch(batch))

    async def aclose(self) -> None:
        await self.client.aclose()
