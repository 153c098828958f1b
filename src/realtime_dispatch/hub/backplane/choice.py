"""Which backplane a hub runs, from its options: none (one replica: the in-process publisher),
``redis`` (one channel every replica reads) or ``redis-cluster`` (a sharded channel per group,
subscribed by the replicas with members of it). :func:`subscriber` and :func:`publisher` build
the two halves; the :class:`~realtime_dispatch.hub.Hub` runs them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from realtime_dispatch.hub.backplane.publishers import (
    FramePublisher,
    InProcessHubPublisher,
    RedisHubPublisher,
)
from realtime_dispatch.hub.backplane.sharded import ShardedBackplaneSubscriber
from realtime_dispatch.hub.backplane.sharded_publisher import ShardedRedisHubPublisher
from realtime_dispatch.hub.backplane.subscriber import BackplaneSubscriber, redis_client
from realtime_dispatch.hub.connections.fanout import GroupFrames
from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.membership.feed import MembershipFeed

SHARDED = "redis-cluster"
"""The ``backplane_mode`` of the interest-routed backplane (Redis Cluster, sharded channels)."""

Subscriber = BackplaneSubscriber | ShardedBackplaneSubscriber


def subscriber(
    url: str | None,
    mode: str,
    deliver: Callable[..., Awaitable[Any]],
    *,
    replica_id: str,
    registry: GroupRegistry,
    membership: MembershipFeed,
) -> Subscriber | None:
    """The subscriber of the pushes other replicas publish, None without a backplane. The
    sharded one follows the registry's groups (it subscribes to the channels of the groups this
    replica has members in) and acknowledges the membership feed's barriers."""
    if not url:
        return None
    if mode != SHARDED:
        return BackplaneSubscriber(url, deliver)
    sharded = ShardedBackplaneSubscriber(url, deliver, replica_id=replica_id)
    registry.on_group_change = sharded.group_changed
    membership.on_barrier = sharded.barrier
    return sharded


def publisher(
    url: str | None,
    mode: str,
    deliver: Callable[[GroupFrames, Sequence[str]], Awaitable[bool]],
    *,
    dsn: str,
    barrier_timeout: float,
) -> FramePublisher:
    """The dispatcher's publisher: to the backplane when there is one, else ``deliver`` (this
    replica's delivery path) in this process."""
    if url is not None and mode == SHARDED:
        return ShardedRedisHubPublisher(url, dsn=dsn, barrier_timeout=barrier_timeout)
    if url is not None:
        return RedisHubPublisher(redis_client(url), owns_client=True)
    return InProcessHubPublisher(deliver)


async def interest_settled(subscriber: Subscriber | None, within: float) -> bool:
    """With the interest-routed backplane: wait until ``subscriber`` is subscribed to every
    group this replica's connections are in (a new connection's chats, say). True at once
    otherwise."""
    if isinstance(subscriber, ShardedBackplaneSubscriber):
        return await subscriber.settled(within)
    return True
