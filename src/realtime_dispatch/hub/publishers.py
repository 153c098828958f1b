"""The hub's two :class:`~realtime_dispatch.push.HubPublisher` implementations.

* :class:`InProcessHubPublisher`: the hub runs in the caller's process; a push is delivered to
  this replica's connections before ``publish`` returns.
* :class:`RedisHubPublisher`: the backplane; success means "published to Redis and received by
  at least one hub replica" (every subscribed replica delivers to its own connections). A Redis
  outage, or a publish that no replica received, is a
  :class:`~realtime_dispatch.errors.HubUnavailable`, so the rows are retried, never lost.

Both serialise each push's invocation record once, whatever the number of recipients.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.backplane import CHANNEL, encode_push, redis_client
from realtime_dispatch.hub.protocol import push_record
from realtime_dispatch.push import PublishResult, Push

GroupFrames = Sequence[tuple[str, bytes]]


class FramePublisher(Protocol):
    """A :class:`~realtime_dispatch.push.HubPublisher` that also takes records
    serialised already (the HTTP push endpoint's case)."""

    async def publish(self, pushes: Sequence[Push]) -> Sequence[PublishResult]: ...

    async def publish_frames(self, items: GroupFrames) -> list[PublishResult]: ...

    async def aclose(self) -> None: ...


def push_frames(pushes: Sequence[Push]) -> list[tuple[str, bytes]]:
    return [(p.group, push_record(p.target, p.payload_json)) for p in pushes]


class InProcessHubPublisher:
    """Delivers through ``deliver`` (the hub's local fan-out); it returns False when the hub
    cannot order the push after membership changes (its membership feed is down)."""

    def __init__(self, deliver: Callable[[GroupFrames], Awaitable[bool]]) -> None:
        self._deliver = deliver

    async def publish(self, pushes: Sequence[Push]) -> Sequence[PublishResult]:
        return await self.publish_frames(push_frames(pushes))

    async def publish_frames(self, items: GroupFrames) -> list[PublishResult]:
        if not items:
            return []
        if await self._deliver(items):
            return [None] * len(items)
        error = HubUnavailable("hub membership feed unavailable", code="MembershipUnavailable")
        return [error] * len(items)

    async def aclose(self) -> None:
        return None


class RedisHubPublisher:
    """Publishes pushes to the backplane channel, one pipelined round trip per call."""

    def __init__(
        self, client: aioredis.Redis | str, *, owns_client: bool = False, channel: str = CHANNEL
    ) -> None:
        """``client`` is a Redis client the caller keeps owning (unless ``owns_client``), or a
        URL, in which case the publisher makes and owns its client."""
        if isinstance(client, str):
            client, owns_client = redis_client(client), True
        self._client = client
        self._owns_client = owns_client
        self._channel = channel
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, channel: str = CHANNEL) -> RedisHubPublisher:
        """A publisher with its own client (the worker's case); :meth:`aclose` closes it."""
        return cls(redis_client(url), owns_client=True, channel=channel)

    async def publish(self, pushes: Sequence[Push]) -> Sequence[PublishResult]:
        return await self.publish_frames(push_frames(pushes))

    async def publish_frames(self, items: GroupFrames) -> list[PublishResult]:
        if not items:
            return []
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for group, frame in items:
                    pipe.publish(self._channel, encode_push(group, frame))
                receivers = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            error = HubUnavailable(
                f"backplane unavailable ({type(exc).__name__})", code="BackplaneUnavailable"
            )
            return [error] * len(items)
        # PUBLISH answers how many subscribers got the message: the hub replicas. None means no
        # replica could deliver it (all down, or re-subscribing after a Redis restart): retry.
        nobody = HubUnavailable("no hub replica is subscribed", code="NoSubscribers")
        return [None if count else nobody for count in receivers]

    async def aclose(self) -> None:
        if self._owns_client and not self._closed:
            self._closed = True
            await self._client.aclose()
