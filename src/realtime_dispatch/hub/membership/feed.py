"""Membership from PostgreSQL: the initial ``chat:`` groups of a new connection, and live changes
from ``LISTEN realtime_membership`` on a dedicated connection outside the pool.

The listening connection reconnects by itself. Notifications sent while it was down are lost, so
after every (re)connect it re-reads the memberships of every user connected to this replica.

Other hub state kept current from PostgreSQL shares that connection as a :class:`Subscription`
(the revocations, :mod:`.revocation_watch`): its channel is listened to, and it is resynced after
every (re)connect, before the feed counts as ready.

:meth:`MembershipFeed.barrier` is how a push is ordered after the membership changes committed
before it: a round trip on the listening connection. PostgreSQL delivers the notifications a
session has been signalled before it reports the query done, and asyncpg runs the listener
callbacks before the query's caller resumes, so once ``SELECT 1`` returns, every change committed
before the push was produced has been applied (it goes as a simple query: one message, no
prepared statement). A batch may instead carry a worker's membership marks
(:mod:`realtime_dispatch.delivery.marks`): once the feed has applied one of them
(:meth:`MembershipFeed.heard`), the batch needs no round trip.

A notification without ``active`` is a hint (:mod:`.tracker`): the feed re-reads that user's
``member_chats``, hints that come together sharing one query (:mod:`.hints`). A change counts as
applied only once its re-read is: the barrier waits for the re-reads of the hints heard before
its round trip, and a barrier token (a mark) counts as heard only once the hints heard before it
are applied. A re-read that fails makes the feed reconnect, and so resync every connected user.

This module holds the listening connection, its resync and the barrier; the loads of
connections opening are in :mod:`.loads`, the re-reads of hints in :mod:`.hints`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import asyncpg
import structlog

from realtime_dispatch.database.connections import DB_ERRORS as DB_ERRORS  # noqa: PLC0414  (re-exported)
from realtime_dispatch.database.connections import close_quietly
from realtime_dispatch.delivery.channels import MEMBERSHIP_CHANNEL
from realtime_dispatch.delivery.marks import parse_barrier
from realtime_dispatch.hub.membership.hints import HintRereads
from realtime_dispatch.hub.membership.loads import ConnectionLoads
from realtime_dispatch.hub.membership.tracker import MembershipTracker, parse_change
from realtime_dispatch.manifest.manifest import shipped_manifest
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

log = structlog.get_logger(__name__)

BARRIER_QUERY = "SELECT 1"
"""The barrier's round trip on the listening connection."""

HEARD_TOKENS = 256
"""Barrier tokens a feed remembers (workers send one every few seconds, and after changes)."""


def shipped_member_chats() -> str:
    """The reference messenger's ``member_chats`` query (from the shipped manifest)."""
    sql = shipped_manifest().sql("member_chats")
    assert sql is not None
    return sql


class Subscription(Protocol):
    """A channel listened to on the feed's connection, and its state reloaded after every
    (re)connect."""

    channel: str

    def notified(self, payload: str) -> None: ...

    async def resync(self, pool: asyncpg.Pool) -> None: ...


class MembershipFeed:
    def __init__(
        self,
        *,
        dsn: str,
        pool: asyncpg.Pool | None,
        tracker: MembershipTracker,
        connected_users: Callable[[], Collection[Key]],
        member_chats_sql: str | None = None,
        subscriptions: Sequence[Subscription] = (),
        keys: KeyCodec = UUID_KEYS,
        health_interval: float = 5.0,
        query_timeout: float = 5.0,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float = 5.0,
    ) -> None:
        self._dsn = dsn
        self.pool = pool
        self._tracker = tracker
        self._connected_users = connected_users
        # The manifest's member_chats: $1 <key>[] user ids → (user_id, chat_id) of active
        # memberships; on connect (one user) and after a reconnect (every connected user).
        self._member_chats = member_chats_sql or shipped_member_chats()
        self._subscriptions = tuple(subscriptions)
        self._keys = keys  # the ids of a notification
        self._health_interval = health_interval
        self._query_timeout = query_timeout
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._conn: Any = None
        self._lost = asyncio.Event()
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._next_barrier: asyncio.Future[bool] | None = None
        self._loads = ConnectionLoads(tracker, self.member_chats)
        self.on_barrier: Callable[[str], None] | None = None
        """Called with each barrier token, after every change notified before it is applied."""
        self._heard: dict[str, None] = {}  # barrier tokens applied on this session, oldest first
        self._hints = HintRereads(
            tracker, self.member_chats, on_token=self._token_heard, on_failure=self._lost.set
        )

    async def load_connection(self, connection_id: str, user_id: Key) -> None:
        """Join a registered connection to its user's active chats (raises on DB errors);
        connections opening together share one query (:mod:`.loads`)."""
        await self._loads.load(connection_id, user_id)

    @property
    def load_queries(self) -> int:
        """``member_chats`` queries run for connections opening (one per batch of them)."""
        return self._loads.queries

    @property
    def hint_queries(self) -> int:
        """``member_chats`` queries run for hints (one per batch of hinted users)."""
        return self._hints.queries

    async def member_chats(self, users: list[Key]) -> list[tuple[Key, Key]]:
        """``(user_id, chat_id)`` of the users' active memberships: the manifest's
        ``member_chats``, the query a connection's groups come from (presence's check)."""
        rows = await self._require_pool().fetch(
            self._member_chats, users, timeout=self._query_timeout
        )
        return [(r["user_id"], r["chat_id"]) for r in rows]

    def _require_pool(self) -> asyncpg.Pool:
        if self.pool is None:
            raise RuntimeError("membership feed has no pool")
        return self.pool

    async def run(self) -> None:
        """Listen forever, reconnecting with backoff; cancel to stop."""
        delay = self._reconnect_delay
        while True:
            try:
                await self._session()
            except DB_ERRORS as exc:
                if self.ready.is_set():
                    # A session that worked ends by raising too: start the backoff over, so
                    # every loss after a healthy stretch is retried at once (not 5 s later).
                    delay = self._reconnect_delay
                log.warning("membership_feed_lost", error=type(exc).__name__, retry_in=delay)
            finally:
                self.ready.clear()
                await self._close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_reconnect_delay)

    async def _session(self) -> None:
        self._lost.clear()
        self._heard.clear()
        self._conn = await asyncpg.connect(
            self._dsn,
            timeout=self._query_timeout,
            server_settings={"application_name": "realtime-dispatch-hub-membership"},
        )
        self._conn.add_termination_listener(lambda _conn: self._lost.set())
        await self._conn.add_listener(MEMBERSHIP_CHANNEL, self._on_notify)
        for subscription in self._subscriptions:
            await self._conn.add_listener(subscription.channel, _callback(subscription))
        await self._resync()
        for subscription in self._subscriptions:
            await subscription.resync(self._require_pool())
        self.ready.set()
        log.info("membership_feed_connected")
        while not self._lost.is_set():
            try:
                await asyncio.wait_for(self._lost.wait(), self._health_interval)
            except TimeoutError:
                await self._ping()
        raise ConnectionResetError("membership connection closed")

    async def _resync(self) -> None:
        users = list(self._connected_users())
        token = self._tracker.begin_load()
        try:
            rows = await self.member_chats(users) if users else []
        except BaseException:
            self._tracker.cancel_load(token)
            raise
        self._tracker.finish_load(token, rows, users=users)
        log.info("membership_resynced", users=len(users))

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        token = parse_barrier(payload)
        if token is not None:
            if not self._hints.hold(token):  # held while hints heard before it are pending
                self._token_heard(token)
            return
        change = parse_change(payload, self._keys)
        if change is None:
            log.warning("membership_notification_invalid")
            return
        if change.active is None:
            self._hints.hint(change.user_id)
        else:
            self._tracker.apply(change)

    def _token_heard(self, token: str) -> None:
        heard = self._heard
        heard[token] = None
        if len(heard) > HEARD_TOKENS:
            del heard[next(iter(heard))]
        if self.on_barrier is not None:
            self.on_barrier(token)

    async def _ping(self) -> None:
        async with self._lock:
            await self._conn.fetchval("SELECT 1", timeout=self._query_timeout)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        await self._hints.stop()
        await close_quietly(conn)

    def heard(self, tokens: Collection[str]) -> bool:
        """Whether the feed is up and has applied one of ``tokens`` (a batch's membership
        marks) on its current session: then every change notified before it is applied too,
        and the batch needs no :meth:`barrier`. Tokens heard before a reconnect do not count."""
        if not self.ready.is_set():
            return False
        return not self._heard.keys().isdisjoint(tokens)

    async def barrier(self, within: float) -> bool:
        """Wait until every membership change committed before now has been applied.

        Concurrent callers share one round trip, one that starts after they all arrived: the
        first caller runs it, the others wait for its outcome. False when the listening
        connection stays down for longer than ``within`` seconds.
        """
        future = self._next_barrier
        if future is not None:
            return await asyncio.shield(future)
        future = asyncio.get_running_loop().create_future()
        self._next_barrier = future
        ok = False
        try:
            async with self._lock:
                if self._next_barrier is future:
                    self._next_barrier = None
                async with asyncio.timeout(within):
                    await self.ready.wait()
                    # The simple query protocol (``execute`` without arguments): one message
                    # each way and no statement cache, half the CPU of ``fetchval``'s extended
                    # protocol; the notifications still come before its ReadyForQuery.
                    await self._conn.execute(BARRIER_QUERY)
                    # the hints heard before that round trip: their users read again
                    ok = await self._hints.applied()
        except (*DB_ERRORS, AttributeError):
            ok = False
            if self.ready.is_set():
                # The connection looked fine but its round trip failed: reconnect now rather
                # than at the next health ping, and refuse pushes only until then.
                self._lost.set()
        finally:
            if self._next_barrier is future:
                self._next_barrier = None
            future.set_result(ok)
        return ok


def _callback(subscription: Subscription) -> Callable[[object, int, str, str], None]:
    def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        subscription.notified(payload)

    return on_notify
