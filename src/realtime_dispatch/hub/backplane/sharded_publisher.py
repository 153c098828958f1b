"""The dispatcher's side of the interest-routed backplane (see
:mod:`realtime_dispatch.hub.backplane.sharded`): :class:`ShardedRedisHubPublisher`.

Before it publishes a chat push it orders itself after the membership changes committed before
the push (:class:`MembershipBarrier`); then one pipelined ``SPUBLISH`` per push. A push that no
replica received is done when some replica is alive (nobody of the group is connected), and
retried when none is.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import structlog
from redis.asyncio.cluster import RedisCluster

from realtime_dispatch.database.connections import DB_ERRORS, close_quietly
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.delivery.marks import barrier_payload, parse_barrier
from realtime_dispatch.delivery.push import PublishResult
from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.backplane.publishers import FramesPublisher
from realtime_dispatch.hub.backplane.sharded import (
    ACKS_CHANNEL,
    HEARTBEAT_TTL,
    REDIS_ERRORS,
    cluster_client,
    group_channel,
    live_replicas,
)
from realtime_dispatch.hub.connections.fanout import GroupFrames
from realtime_dispatch.hub.connections.registry import CHAT_PREFIX

log = structlog.get_logger(__name__)

ALIVE_CACHE = 0.1  # seconds a live-replica answer is reused


class MembershipBarrier:
    """Orders a publish after every membership change committed before it, on every replica.

    A round trip on this process's own ``LISTEN realtime_membership`` connection makes sure it
    has seen every change committed before now. If none came in since the last barrier, every
    replica already acknowledged a barrier sent after the last change it needed: nothing to wait
    for. Otherwise it sends a token on the same channel and waits for every live replica's
    acknowledgement. Concurrent callers share one barrier.
    """

    def __init__(self, dsn: str, client: RedisCluster, *, within: float) -> None:
        self._dsn = dsn
        self._client = client
        self._within = within
        self._conn: Any = None
        self._dirty = True  # nothing is known before the first session
        self._waiting: dict[str, tuple[set[str], asyncio.Event]] = {}
        self._lock = asyncio.Lock()

    def acknowledged(self, token: str, replica: str) -> None:
        entry = self._waiting.get(token)
        if entry is not None:
            expected, done = entry
            expected.discard(replica)
            if not expected:
                done.set()

    async def order(self) -> bool:
        async with self._lock:
            try:
                async with asyncio.timeout(self._within):
                    return await self._order()
            except TimeoutError:
                log.warning("backplane_barrier_timeout")
                self._dirty = True
                return False
            except (*DB_ERRORS, *REDIS_ERRORS) as exc:
                log.warning("backplane_barrier_failed", error=type(exc).__name__)
                await self.aclose()
                self._dirty = True
                return False

    async def _order(self) -> bool:
        conn = await self._connection()
        await conn.fetchval("SELECT 1")
        if not self._dirty:
            return True
        self._dirty = False
        replicas, _unready = await live_replicas(self._client)
        if not replicas:
            return True  # nobody to order: the pushes find no subscriber and are retried
        token = uuid.uuid4().hex
        done = asyncio.Event()
        self._waiting[token] = (replicas, done)
        try:
            payload = barrier_payload(token)
            await conn.execute("SELECT pg_notify($1, $2)", MEMBERSHIP_CHANNEL, payload)
            await done.wait()
        except BaseException:
            self._dirty = True
            raise
        finally:
            del self._waiting[token]
        return True

    async def _connection(self) -> Any:
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        conn = await asyncpg.connect(
            self._dsn, server_settings={"application_name": "realtime-dispatch-barrier"}
        )
        await conn.add_listener(MEMBERSHIP_CHANNEL, self._on_notify)
        self._conn = conn
        self._dirty = True  # changes may have been missed while not listening
        return conn

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str) or parse_barrier(payload) is None:
            self._dirty = True

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        await close_quietly(conn)


class ShardedRedisHubPublisher(FramesPublisher):
    """Publishes each push to its group's sharded channel on a Redis Cluster."""

    def __init__(self, url: str, *, dsn: str, barrier_timeout: float = 2.0) -> None:
        self._client = cluster_client(url)
        self._barrier = MembershipBarrier(dsn, self._client, within=barrier_timeout)
        self._acks: Any = None
        self._acks_reader: asyncio.Task[None] | None = None
        self._alive_at = 0.0
        self._alive = False
        self._unsure_until = 0.0
        self._closed = False

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]:
        """``marks`` are not used: the replicas' acknowledgements of this publisher's own
        barrier order the pushes (:class:`MembershipBarrier`)."""
        del marks
        if not items:
            return []
        try:
            await self._start()
        except REDIS_ERRORS as exc:
            self._saw_error()
            return [_unavailable(exc)] * len(items)
        ordered = True
        if any(group.startswith(CHAT_PREFIX) for group, _ in items):
            ordered = await self._barrier.order()
        unordered = HubUnavailable(
            "hub replicas did not confirm membership in time", code="MembershipUnavailable"
        )
        results: list[PublishResult] = [None] * len(items)
        sent: list[int] = []
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for index, (group, frame) in enumerate(items):
                    if not ordered and group.startswith(CHAT_PREFIX):
                        results[index] = unordered
                        continue
                    pipe.spublish(group_channel(group), frame)
                    sent.append(index)
                counts = await pipe.execute() if sent else []
            if any(count == 0 for count in counts) and not await self._anyone_listening():
                nobody = HubUnavailable("no hub replica is subscribed", code="NoSubscribers")
                for index, count in zip(sent, counts, strict=True):
                    if count == 0:
                        results[index] = nobody
        except REDIS_ERRORS as exc:
            self._saw_error()
            error = _unavailable(exc)
            for index in sent:
                results[index] = error
        return results

    def _saw_error(self) -> None:
        # The replicas most likely lost their subscriptions in the same fault, and their
        # heartbeats may outlive it by up to HEARTBEAT_TTL: until then, "nobody received it"
        # means "retry", not "nobody of the group is connected".
        self._unsure_until = time.monotonic() + HEARTBEAT_TTL
        self._alive_at = 0.0

    async def _start(self) -> None:
        if self._acks_reader is not None and not self._acks_reader.done():
            return
        await self._client.initialize()
        self._acks = self._client.pubsub()
        await self._acks.ssubscribe(ACKS_CHANNEL)
        # The first message is the shard's confirmation: acknowledgements sent after it arrive.
        async with asyncio.timeout(5.0):
            while True:
                message = await self._acks.get_sharded_message(timeout=1.0)
                if message is not None and message["type"] == "ssubscribe":
                    break
        self._acks_reader = asyncio.create_task(self._read_acks())

    async def _read_acks(self) -> None:
        node_pubsubs = list(self._acks.node_pubsub_mapping.values())
        with contextlib.suppress(*REDIS_ERRORS):
            while True:
                message = await node_pubsubs[0].get_message(timeout=1.0)
                if message is None or message.get("type") != "smessage":
                    continue
                token, _, replica = message["data"].decode().partition(" ")
                self._barrier.acknowledged(token, replica)

    async def _anyone_listening(self) -> bool:
        """Whether a push that nobody received found healthy replicas, none with members."""
        now = time.monotonic()
        if now < self._unsure_until:
            return False
        if now - self._alive_at > ALIVE_CACHE:
            alive, unready = await live_replicas(self._client)
            self._alive = bool(alive) and not unready
            self._alive_at = now
        return self._alive

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._acks_reader is not None:
            self._acks_reader.cancel()
            with contextlib.suppress(BaseException):
                await self._acks_reader
        if self._acks is not None:
            with contextlib.suppress(Exception):
                await self._acks.aclose()
        await self._barrier.aclose()
        await self._client.aclose()


def _unavailable(exc: BaseException) -> HubUnavailable:
    message = f"backplane unavailable ({type(exc).__name__})"
    return HubUnavailable(message, code="BackplaneUnavailable")
