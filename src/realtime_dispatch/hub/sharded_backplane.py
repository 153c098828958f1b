"""The interest-routed backplane on a Redis Cluster: each group has its own sharded channel
(``SSUBSCRIBE`` / ``SPUBLISH``, Redis >= 7), and a hub replica subscribes only to the groups
that have members connected to it. A push therefore reaches the replicas with members of its
group and no other, and the cluster spreads the channels over its shards.

Three promises of the single-channel backplane are kept:

* **A push nobody could receive is retried.** ``SPUBLISH`` answers how many replicas received
  the push. Zero means either "no member of the group is connected anywhere" (the push is done)
  or "no replica is there" (it must be retried). Replicas that are subscribed and healthy keep a
  heartbeat in :data:`REPLICAS_KEY`; the publisher tells the two cases apart by it.
* **Membership changes apply before the next push.** A replica learns of a join from PostgreSQL
  (``LISTEN realtime_membership``) and must have subscribed to the group's channel before a push
  committed after the join is published. The publisher orders itself after every membership
  change committed before the push (a round trip on its own listening connection); if one came
  in since its last check, it sends a barrier token on the same PostgreSQL channel and waits
  until every live replica reports, on :data:`ACKS_CHANNEL`, that it has applied every change
  before the token and finished the subscriptions they called for. A replica's subscription is
  confirmed by the shard that owns the channel, the same node the publish goes to, so a confirmed
  subscription sees every later publish.
* **A replica that lost its subscriptions says so.** After a Redis error it stops its heartbeat,
  subscribes to every wanted channel again, and only then heartbeats again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)

# One hash tag for the replica registry and the acknowledgements: one slot, one shard.
REPLICAS_KEY = "{realtime-dispatch}:hub:replicas"
ACKS_CHANNEL = "{realtime-dispatch}:hub:barrier-acks"
HEARTBEAT_EVERY = 1.0
HEARTBEAT_TTL = 5.0
SUBSCRIBE_CHUNK = 500
MAX_BATCH = 256

Deliver = Callable[[Sequence[tuple[str, str]]], Awaitable[None]]


def group_channel(group: str) -> str:
    """The sharded channel of a group; the hash tag keeps the whole group name as the key."""
    return f"realtime-dispatch:hub:{{{group}}}"


def group_of_channel(channel: bytes | str) -> str | None:
    name = channel.decode() if isinstance(channel, bytes) else channel
    start, end = name.find("{"), name.rfind("}")
    if start < 0 or end <= start:
        return None
    return name[start + 1 : end]


def cluster_client(url: str, *, timeout: float | None = 2.0) -> RedisCluster:
    return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=2.0)


class InterestSet:
    """Which groups this replica wants, and up to which change the subscriptions are settled.
    Pure: the registry reports groups that gain their first member or lose their last one."""

    __slots__ = ("_settled", "generation", "settled_generation", "wanted")

    def __init__(self) -> None:
        self.wanted: set[str] = set()
        self.generation = 0
        self.settled_generation = 0
        self._settled = asyncio.Condition()

    def changed(self, group: str, present: bool) -> None:
        if present:
            self.wanted.add(group)
        else:
            self.wanted.discard(group)
        self.generation += 1

    async def mark_settled(self, generation: int) -> None:
        async with self._settled:
            self.settled_generation = max(self.settled_generation, generation)
            self._settled.notify_all()

    async def wait_settled(self, generation: int | None = None) -> None:
        """Until every change made before this call (or up to ``generation``) is subscribed."""
        target = self.generation if generation is None else generation
        async with self._settled:
            await self._settled.wait_for(lambda: self.settled_generation >= target)


class ShardedBackplaneSubscriber:
    """Subscribes this replica to the channels of the groups it has members of, hands what
    arrives to ``deliver``, heartbeats while healthy, and acknowledges membership barriers."""

    def __init__(
        self,
        url: str,
        deliver: Deliver,
        *,
        replica_id: str,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float = 5.0,
    ) -> None:
        self._url = url
        self._deliver = deliver
        self.replica_id = replica_id
        self.interest = InterestSet()
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._dirty = asyncio.Event()
        self._subscribed: set[str] = set()
        self._unconfirmed: set[bytes] = set()
        self._confirmed = asyncio.Event()
        self._client: RedisCluster | None = None
        self._acks: set[asyncio.Future[None]] = set()
        self.ready = asyncio.Event()

    # called by the registry, synchronously, for every group that appears or disappears
    def group_changed(self, group: str, present: bool) -> None:
        self.interest.changed(group, present)
        self._dirty.set()

    async def settled(self, within: float) -> bool:
        """Wait until the subscriptions reflect every membership change made so far."""
        try:
            async with asyncio.timeout(within):
                await self.interest.wait_settled()
        except TimeoutError:
            return False
        return True

    def barrier(self, token: str) -> None:
        """A membership barrier arrived (after every change committed before it): acknowledge
        once the subscriptions those changes called for are confirmed."""
        generation = self.interest.generation
        task = asyncio.ensure_future(self._acknowledge(token, generation))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _acknowledge(self, token: str, generation: int) -> None:
        try:
            await asyncio.wait_for(self.interest.wait_settled(generation), HEARTBEAT_TTL)
            client = self._client
            if client is not None and self.ready.is_set():
                await client.spublish(ACKS_CHANNEL, f"{token} {self.replica_id}")
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("backplane_barrier_ack_failed", error=type(exc).__name__)

    async def run(self) -> None:
        delay = self._reconnect_delay
        while True:
            client = cluster_client(self._url, timeout=None)
            self._client = client
            pubsub = client.pubsub()
            tasks: list[asyncio.Task[None]] = []
            try:
                await client.initialize()
                self._subscribed.clear()
                self._unconfirmed.clear()
                failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                tasks.append(asyncio.create_task(self._sync(pubsub, tasks, failed)))
                tasks.append(asyncio.create_task(self._heartbeat(client)))
                self._dirty.set()
                await failed
            except (RedisError, OSError) as exc:
                if self.ready.is_set():
                    delay = self._reconnect_delay
                log.warning("backplane_lost", error=type(exc).__name__, retry_in=delay)
            finally:
                self.ready.clear()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                with contextlib.suppress(RedisError, OSError):
                    await client.zrem(REPLICAS_KEY, self.replica_id)
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                with contextlib.suppress(Exception):
                    await client.aclose()
                self._client = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_reconnect_delay)

    async def _sync(
        self, pubsub: Any, tasks: list[asyncio.Task[None]], failed: asyncio.Future[None]
    ) -> None:
        """Apply interest changes; start a reader for every node connection that appears."""
        readers: dict[int, asyncio.Task[None]] = {}
        try:
            while True:
                await self._dirty.wait()
                self._dirty.clear()
                generation = self.interest.generation
                wanted = set(self.interest.wanted)
                add = sorted(wanted - self._subscribed)
                drop = sorted(self._subscribed - wanted)
                for start in range(0, len(add), SUBSCRIBE_CHUNK):
                    chunk = add[start : start + SUBSCRIBE_CHUNK]
                    channels = [group_channel(g) for g in chunk]
                    self._unconfirmed.update(c.encode() for c in channels)
                    self._confirmed.clear()
                    await pubsub.ssubscribe(*channels)
                    self._subscribed.update(chunk)
                for start in range(0, len(drop), SUBSCRIBE_CHUNK):
                    chunk = drop[start : start + SUBSCRIBE_CHUNK]
                    await pubsub.sunsubscribe(*(group_channel(g) for g in chunk))
                    self._subscribed.difference_update(chunk)
                for node_pubsub in list(pubsub.node_pubsub_mapping.values()):
                    if id(node_pubsub) not in readers:
                        reader = asyncio.create_task(self._read(node_pubsub, failed))
                        readers[id(node_pubsub)] = reader
                        tasks.append(reader)
                # A subscription is in place once its shard has confirmed it: only then does
                # every later publish to that shard reach this replica.
                if self._unconfirmed:
                    await self._confirmed.wait()
                await self.interest.mark_settled(generation)
                if not self.ready.is_set():
                    self.ready.set()
                    log.info("backplane_subscribed", groups=len(self._subscribed))
        except (RedisError, OSError) as exc:
            if not failed.done():
                failed.set_exception(exc)
        except asyncio.CancelledError:
            raise

    async def _read(self, node_pubsub: Any, failed: asyncio.Future[None]) -> None:
        try:
            while True:
                message = await node_pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                batch: list[tuple[str, str]] = []
                while message is not None:
                    kind = message.get("type")
                    if kind == "sunsubscribe":
                        # The shard dropped a channel (its slot moved): start over.
                        group = group_of_channel(message["channel"])
                        if group in self.interest.wanted and group in self._subscribed:
                            raise ConnectionResetError("sharded channel moved")
                    if kind == "ssubscribe":
                        self._unconfirmed.discard(message["channel"])
                        if not self._unconfirmed:
                            self._confirmed.set()
                    elif kind == "smessage":
                        group = group_of_channel(message["channel"])
                        try:
                            frame = message["data"].decode()
                        except UnicodeDecodeError:
                            frame = None
                        if group is None or frame is None:
                            log.warning("backplane_message_invalid")
                        else:
                            batch.append((group, frame))
                    if len(batch) >= MAX_BATCH:
                        break
                    message = await node_pubsub.get_message(timeout=0.0)
                if batch:
                    await self._deliver(batch)
        except (RedisError, OSError) as exc:
            if not failed.done():
                failed.set_exception(exc)

    async def _heartbeat(self, client: RedisCluster) -> None:
        while True:
            if self.ready.is_set():
                await client.zadd(REPLICAS_KEY, {self.replica_id: time.time() + HEARTBEAT_TTL})
            await asyncio.sleep(HEARTBEAT_EVERY)


async def live_replicas(client: RedisCluster) -> list[str]:
    """Replica ids whose heartbeat has not expired (and a sweep of those that have)."""
    now = time.time()
    await client.zremrangebyscore(REPLICAS_KEY, "-inf", now)
    members = await client.zrangebyscore(REPLICAS_KEY, now, "+inf")
    return [m.decode() if isinstance(m, bytes) else str(m) for m in members]
