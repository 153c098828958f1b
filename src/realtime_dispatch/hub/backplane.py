"""The Redis backplane: every replica subscribes to one pub/sub channel and delivers each push to
its own connections. A message is ``{group}\\n{frame}``: the frame is the invocation record,
serialised once by the publisher and relayed byte for byte.

One channel rather than a channel per group: a replica would otherwise have to (un)subscribe as
memberships change, and a change racing a push could lose it. Every replica reads every push and
looks its group up locally, which at this scale costs less than the bookkeeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)

CHANNEL = "realtime-dispatch:hub:messenger"
MAX_BATCH = 256

Deliver = Callable[[Sequence[tuple[str, bytes]]], Awaitable[object]]


def encode_push(group: str, frame: bytes) -> bytes:
    return group.encode() + b"\n" + frame


def decode_push(data: bytes) -> tuple[str, bytes] | None:
    """The group and the record bytes (checked to be UTF-8: they go out as text frames)."""
    group, sep, frame = data.partition(b"\n")
    if not sep or not group or not frame:
        return None
    try:
        if not frame.isascii():  # checked, never kept as str: the bytes go out as they are
            frame.decode()
        return group.decode(), frame
    except UnicodeDecodeError:
        return None


def redis_client(url: str, *, timeout: float | None = 2.0) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=2.0,
        health_check_interval=10,
    )


class BackplaneSubscriber:
    """Reads the channel and hands batches of ``(group, frame)`` to ``deliver``; reconnects by
    itself. Pushes published while it is disconnected are not seen (pub/sub keeps nothing);
    clients recover those over REST, as after any reconnect."""

    def __init__(
        self,
        url: str,
        deliver: Deliver,
        *,
        channel: str = CHANNEL,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float = 5.0,
    ) -> None:
        self._url = url
        self._deliver = deliver
        self._channel = channel
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self.ready = asyncio.Event()

    async def run(self) -> None:
        delay = self._reconnect_delay
        while True:
            client = redis_client(self._url, timeout=None)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._channel)
                    self.ready.set()
                    log.info("backplane_subscribed")
                    delay = self._reconnect_delay
                    await self._read(pubsub)
            except (RedisError, OSError) as exc:
                log.warning("backplane_lost", error=type(exc).__name__, retry_in=delay)
            finally:
                self.ready.clear()
                await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_reconnect_delay)

    async def _read(self, pubsub: aioredis.client.PubSub) -> None:
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is None:
                continue
            batch: list[tuple[str, bytes]] = []
            while message is not None:
                if message.get("type") == "message":
                    decoded = decode_push(message["data"])
                    if decoded is None:
                        log.warning("backplane_message_invalid")
                    else:
                        batch.append(decoded)
                if len(batch) >= MAX_BATCH:
                    break
                message = await pubsub.get_message(timeout=0.0)
            if batch:
                await self._deliver(batch)
