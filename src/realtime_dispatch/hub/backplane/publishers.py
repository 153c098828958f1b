"""The hub's two :class:`~realtime_dispatch.delivery.push.HubPublisher` implementations.

* :class:`InProcessHubPublisher`: the hub runs in the caller's process; a push is delivered to
  this replica's connections before ``publish`` returns.
* :class:`RedisHubPublisher`: the backplane (``PUBLISH`` on a connection of its own, see
  :class:`~realtime_dispatch.hub.backplane.resp.CommandConnection`); success means "published to
  Redis
  and received by at least one hub replica" (every subscribed replica delivers to its own
  connections). A Redis outage, or a publish that no replica received, is a
  :class:`~realtime_dispatch.errors.HubUnavailable` for every push the message carried, so the
  rows are retried, never lost. A batch goes as one message (``PUBLISH``), or one per
  :data:`MAX_MESSAGE_PUSHES` pushes, while every replica reads that format.

Both hand on the runner's membership marks (:mod:`realtime_dispatch.delivery.marks`), which
spare the hub its membership barrier; over the backplane they travel in the message. A batch
received from another process's worker (the HTTP batch endpoint) hands on the marks it carried
instead (``publish_frames(items, marks)``).

Both serialise each push's invocation record once, whatever the number of recipients.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from realtime_dispatch.delivery.push import PublishResult, Push
from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.backplane.resp import CommandConnection
from realtime_dispatch.hub.backplane.subscriber import (
    CHANNEL,
    MAX_BATCH,
    batch_channel,
    encode_batch,
    encode_push,
    redis_client,
)
from realtime_dispatch.hub.connections.fanout import GroupFrames
from realtime_dispatch.hub.wire.protocol import push_record

MAX_MESSAGE_PUSHES = MAX_BATCH
MAX_MESSAGE_BYTES = 1024 * 1024
FORMAT_CHECK_EVERY = 1.0
"""Seconds between two checks of which message format every replica reads."""


class FramePublisher(Protocol):
    """A :class:`~realtime_dispatch.delivery.push.HubPublisher` that also takes records
    serialised already (the HTTP push endpoint's case), with the membership marks they carry
    (:mod:`realtime_dispatch.delivery.marks`; none is ``()``)."""

    async def publish(
        self,
        pushes: Sequence[Push],
        *,
        deadline: float | None = None,
        marks: Sequence[str] = (),
    ) -> Sequence[PublishResult]: ...

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]: ...

    async def aclose(self) -> None: ...


def push_frames(pushes: Sequence[Push]) -> list[tuple[str, bytes]]:
    return [(p.group, push_record(p.target, p.payload_json)) for p in pushes]


class FramesPublisher:
    """A :class:`FramePublisher` whose ``publish`` is ``publish_frames`` of the pushes'
    records, with the same marks: a publisher implements ``publish_frames`` (and ``aclose``).
    The ``deadline`` is not needed: the whole slice goes in one call that does not wait on a
    hub (the dispatcher still cuts a call that outlives it)."""

    async def publish(
        self,
        pushes: Sequence[Push],
        *,
        deadline: float | None = None,
        marks: Sequence[str] = (),
    ) -> Sequence[PublishResult]:
        del deadline
        return await self.publish_frames(push_frames(pushes), marks)

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]:
        raise NotImplementedError


class InProcessHubPublisher(FramesPublisher):
    """Delivers through ``deliver`` (the hub's local fan-out) with the runner's membership marks
    (in ``serve``); it returns False when the hub cannot order the push after membership
    changes (its membership feed is down)."""

    def __init__(self, deliver: Callable[[GroupFrames, Sequence[str]], Awaitable[bool]]) -> None:
        self._deliver = deliver

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]:
        if not items:
            return []
        if await self._deliver(items, marks):
            return [None] * len(items)
        error = HubUnavailable("hub membership feed unavailable", code="MembershipUnavailable")
        return [error] * len(items)

    async def aclose(self) -> None:
        return None


class RedisHubPublisher(FramesPublisher):
    """Publishes pushes to the backplane, one pipelined round trip per call: a batch message per
    call (format 2) when every subscribed replica reads it, else a message per push (format 1,
    what replicas of older versions read); see :mod:`realtime_dispatch.hub.backplane.subscriber`."""

    def __init__(
        self,
        client: aioredis.Redis | str,
        *,
        owns_client: bool = False,
        channel: str = CHANNEL,
        format_check_every: float = FORMAT_CHECK_EVERY,
    ) -> None:
        """``client`` is a Redis client the caller keeps owning (unless ``owns_client``), or a
        URL, in which case the publisher makes and owns its client."""
        if isinstance(client, str):
            client, owns_client = redis_client(client), True
        self._client = client
        self._owns_client = owns_client
        self._commands = CommandConnection(client)
        self._channel = channel.encode()
        self._batch_channel = batch_channel(channel).encode()
        self._batched = False
        self._format_check_every = format_check_every
        self._format_checked = -format_check_every
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, channel: str = CHANNEL) -> RedisHubPublisher:
        """A publisher with its own client (the worker's case); :meth:`aclose` closes it."""
        return cls(redis_client(url), owns_client=True, channel=channel)

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]:
        if not items:
            return []
        try:
            messages = await self._messages(items, marks)
            receivers = await self._commands.pipeline(
                [(b"PUBLISH", channel, message) for channel, message, _ in messages]
            )
        except (RedisError, OSError, TimeoutError) as exc:
            error = HubUnavailable(
                f"backplane unavailable ({type(exc).__name__})", code="BackplaneUnavailable"
            )
            return [error] * len(items)
        # PUBLISH answers how many subscribers got the message: the hub replicas. None means no
        # replica could deliver it (all down, or re-subscribing after a Redis restart): retry
        # every push the message carried.
        nobody = HubUnavailable("no hub replica is subscribed", code="NoSubscribers")
        results: list[PublishResult] = []
        for (_, _, carried), count in zip(messages, receivers, strict=True):
            results += [None if count else nobody] * carried
        return results

    async def _messages(
        self, items: GroupFrames, marks: Sequence[str]
    ) -> list[tuple[bytes, bytes, int]]:
        """``(channel, message, pushes carried)`` for ``items``, in order. ``marks``: the
        runner's membership marks, when its claims listen for membership changes (read at
        publish time, they are at least as recent as the claim of these rows), or those of a
        batch received from another process."""
        if not await self._all_read_batches():
            channel = self._channel
            return [(channel, encode_push(group, frame), 1) for group, frame in items]
        messages: list[tuple[bytes, bytes, int]] = []
        start = size = 0
        for index, (group, frame) in enumerate(items):
            full = index - start >= MAX_MESSAGE_PUSHES or size + len(frame) > MAX_MESSAGE_BYTES
            if index > start and full:
                chunk = items[start:index]
                messages.append((self._batch_channel, encode_batch(chunk, marks), len(chunk)))
                start, size = index, 0
            size += len(group) + len(frame) + 8
        chunk = items[start:]
        messages.append((self._batch_channel, encode_batch(chunk, marks), len(chunk)))
        return messages

    async def _all_read_batches(self) -> bool:
        """Whether every replica subscribed to format 1 is subscribed to format 2 too (checked
        every :data:`FORMAT_CHECK_EVERY` seconds): then nobody misses a batch message."""
        now = time.monotonic()
        if now - self._format_checked >= self._format_check_every:
            counts = {
                name if isinstance(name, bytes) else str(name).encode(): int(count)
                for name, count in await self._client.pubsub_numsub(
                    self._channel, self._batch_channel
                )
            }
            self._batched = counts.get(self._channel, 0) <= counts.get(self._batch_channel, 0)
            self._format_checked = now
        return self._batched

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._commands.aclose()
            if self._owns_client:
                await self._client.aclose()
