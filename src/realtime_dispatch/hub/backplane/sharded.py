"""The interest-routed backplane on a Redis Cluster: each group has its own sharded channel
(``SSUBSCRIBE`` / ``SPUBLISH``, Redis >= 7), and a hub replica subscribes only to the groups
that have members connected to it. A push therefore reaches the replicas with members of its
group and no other, and the cluster spreads the channels over its shards.

Three promises of the single-channel backplane are kept:

* **A push nobody could receive is retried.** ``SPUBLISH`` answers how many replicas received
  the push. Zero means either "no member of the group is connected anywhere" (the push is done)
  or "the replica with its members is not subscribed right now" (it must be retried). Every
  replica heartbeats in :data:`REPLICAS_KEY`, and also in :data:`UNREADY_KEY` while it is
  (re)subscribing; the publisher counts a push nobody received as done only while some replica
  is alive and none is unready.
* **Membership changes apply before the next push.** A replica learns of a join from PostgreSQL
  (``LISTEN realtime_membership``) and must have subscribed to the group's channel before a push
  committed after the join is published. The publisher orders itself after every membership
  change committed before the push (a round trip on its own listening connection); if one came
  in since its last check, it sends a barrier token on the same PostgreSQL channel and waits
  until every live replica reports, on :data:`ACKS_CHANNEL`, that it has applied every change
  before the token and finished the subscriptions they called for. A replica's subscription is
  confirmed by the shard that owns the channel, the same node the publish goes to, so a confirmed
  subscription sees every later publish.
* **A replica that lost its subscriptions says so.** After a Redis error it marks itself unready
  as soon as the cluster answers again, subscribes to every wanted channel again, and only then
  clears the mark. While the cluster does not answer, its heartbeat cannot be written either:
  for :data:`HEARTBEAT_TTL` after a Redis error of its own, the publisher retries a push that
  nobody received rather than count it done (see ``ShardedRedisHubPublisher``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from realtime_dispatch.hub.wire.signal_envelope import is_signal

log = structlog.get_logger(__name__)

# One hash tag for the replica registry and the acknowledgements: one slot, one shard.
REPLICAS_KEY = "{realtime-dispatch}:hub:replicas"
UNREADY_KEY = "{realtime-dispatch}:hub:unready"
ACKS_CHANNEL = "{realtime-dispatch}:hub:barrier-acks"
HEARTBEAT_EVERY = 0.5
HEARTBEAT_TTL = 3.0
SUBSCRIBE_CHUNK = 500
MAX_BATCH = 256

# What a cluster client raises when the cluster or a node is away (RedisClusterException and its
# SlotNotCoveredError are not RedisErrors).
REDIS_ERRORS = (RedisError, RedisClusterException, OSError, TimeoutError)

Deliver = Callable[[Sequence[tuple[str, bytes]]], Awaitable[object]]


def group_channel(group: str) -> str:
    """The sharded channel of a group; the hash tag keeps the whole group name as the key."""
    return f"realtime-dispatch:hub:{{{group}}}"


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def group_of_channel(channel: bytes | str) -> str | None:
    name = channel.decode() if isinstance(channel, bytes) else channel
    start, end = name.find("{"), name.rfind("}")
    if start < 0 or end <= start:
        return None
    return name[start + 1 : end]


def cluster_client(url: str, *, timeout: float | None = 2.0) -> RedisCluster:
    # No retries inside the client: a failure must surface at once (the dispatcher retries a
    # push with its own backoff, and the publisher must know the replicas may have lost their
    # subscriptions in it), rather than be ridden out for seconds and answered "nobody".
    return RedisCluster.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=2.0,
        retry=Retry(NoBackoff(), 0),
    )


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
        reconnect_delay: float = 0.25,
        max_reconnect_delay: float = 2.0,
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
        except REDIS_ERRORS as exc:
            log.warning("backplane_barrier_ack_failed", error=type(exc).__name__)

    async def run(self) -> None:
        delay = self._reconnect_delay

        def stopping() -> bool:
            task = asyncio.current_task()
            return task is not None and task.cancelling() > 0

        while True:
            client = cluster_client(self._url, timeout=None)
            self._client = client
            pubsub = client.pubsub()
            tasks: list[asyncio.Task[None]] = []
            try:
                await client.initialize()
                # Not subscribed to anything yet: say so before anything else.
                await self._beat(client, ready=False)
                self._subscribed.clear()
                self._unconfirmed.clear()
                failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                tasks.append(asyncio.create_task(self._sync(pubsub, tasks, failed)))
                tasks.append(asyncio.create_task(self._heartbeat(client)))
                self._dirty.set()
                await failed
            except Exception as exc:  # the subscriber never dies: it starts over
                if self.ready.is_set():
                    delay = self._reconnect_delay
                log.warning("backplane_lost", error=type(exc).__name__, retry_in=delay)
            finally:
                self.ready.clear()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                if not stopping():
                    # The healthy nodes' connections may hold pushes already counted as
                    # received: deliver them before those connections close.
                    await self._drain(pubsub)
                with contextlib.suppress(*REDIS_ERRORS):
                    if stopping():  # leaving for good
                        await client.zrem(REPLICAS_KEY, self.replica_id)
                        await client.zrem(UNREADY_KEY, self.replica_id)
                    else:  # coming back: unready until subscribed again
                        await self._beat(client, ready=False)
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
        except Exception as exc:  # any failure ends the session; run() starts a new one
            if not failed.done():
                failed.set_exception(exc)

    async def _drain(self, pubsub: Any) -> None:
        batch: list[tuple[str, bytes]] = []
        for node_pubsub in list(pubsub.node_pubsub_mapping.values()):
            if node_pubsub.connection is None:
                continue
            with contextlib.suppress(*REDIS_ERRORS, RuntimeError):
                while (message := await node_pubsub.get_message(timeout=0.0)) is not None:
                    pushed = self._push_of(message)
                    if pushed is not None:
                        batch.append(pushed)
        if batch:
            await self._deliver(batch)

    def _push_of(self, message: dict[str, Any]) -> tuple[str, bytes] | None:
        if message.get("type") != "smessage":
            return None
        group = group_of_channel(message["channel"])
        data = message["data"]
        if group is None or not isinstance(data, bytes) or not (_is_utf8(data) or is_signal(data)):
            log.warning("backplane_message_invalid")  # records go out as text frames
            return None
        return group, data

    async def _read(self, node_pubsub: Any, failed: asyncio.Future[None]) -> None:
        try:
            while True:
                message = await node_pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                batch: list[tuple[str, bytes]] = []
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
                    elif (pushed := self._push_of(message)) is not None:
                        batch.append(pushed)
                    if len(batch) >= MAX_BATCH:
                        break
                    message = await node_pubsub.get_message(timeout=0.0)
                if batch:
                    await self._deliver(batch)
        except Exception as exc:
            if not failed.done():
                failed.set_exception(exc)

    async def _heartbeat(self, client: RedisCluster) -> None:
        while True:
            # A missed beat is retried at the next one (the entry outlives a few of them).
            with contextlib.suppress(*REDIS_ERRORS):
                await self._beat(client, ready=self.ready.is_set())
            await asyncio.sleep(HEARTBEAT_EVERY)

    async def _beat(self, client: RedisCluster, *, ready: bool) -> None:
        expires = time.time() + HEARTBEAT_TTL
        await client.zadd(REPLICAS_KEY, {self.replica_id: expires})
        if ready:
            await client.zrem(UNREADY_KEY, self.replica_id)
        else:
            await client.zadd(UNREADY_KEY, {self.replica_id: expires})


async def live_replicas(client: RedisCluster) -> tuple[set[str], set[str]]:
    """Replica ids whose heartbeat has not expired, and those of them that are unready
    (re)subscribing; expired entries are swept."""
    now = time.time()
    # Both keys share one hash tag, so one slot: a single pipelined round trip.
    async with client.pipeline(transaction=False) as pipe:
        for key in (REPLICAS_KEY, UNREADY_KEY):
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zrangebyscore(key, now, "+inf")
        _, alive_ids, _, unready_ids = await pipe.execute()
    alive = {m.decode() if isinstance(m, bytes) else str(m) for m in alive_ids}
    unready = {m.decode() if isinstance(m, bytes) else str(m) for m in unready_ids}
    return alive, unready & alive
