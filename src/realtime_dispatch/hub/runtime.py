"""The :class:`Hub`: owns the connections, the group registry, the membership feed, the backplane
subscriber, the metrics, and their background tasks; an explicit async lifecycle.

::

    async with Hub(HubOptions(jwt_secret=secret), pool=pool, dsn=dsn) as hub:
        app = Starlette(routes=hub_routes(hub))      # or mount them beside other routes
        publisher = hub.publisher()                  # a HubPublisher for the dispatcher

Nothing happens in ``__init__`` beyond building values; ``__aenter__`` starts the tasks and
``__aexit__`` closes every connection (with a close message) and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import asyncpg
import structlog
from prometheus_client import CollectorRegistry

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.revocations import Revocations
from realtime_dispatch.auth.tokens import TokenOptions, TokenVerifier
from realtime_dispatch.database import create_pool
from realtime_dispatch.hub.backplane.publishers import (
    FramePublisher,
    GroupFrames,
    InProcessHubPublisher,
    RedisHubPublisher,
)
from realtime_dispatch.hub.backplane.sharded import ShardedBackplaneSubscriber
from realtime_dispatch.hub.backplane.sharded_publisher import ShardedRedisHubPublisher
from realtime_dispatch.hub.backplane.subscriber import BackplaneSubscriber, redis_client
from realtime_dispatch.hub.connections.caps import (
    Admission,
    AdmissionStage,
    ConnectionRefused,
    Reservation,
)
from realtime_dispatch.hub.connections.connection import (
    TOKEN_EXPIRED,
    TOKEN_REVOKED,
    ConnectionLimits,
    HubConnection,
)
from realtime_dispatch.hub.connections.expiry import ExpiryTimer
from realtime_dispatch.hub.connections.registry import CHAT_PREFIX, GroupRegistry, user_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.http_refusals import HttpRefusals
from realtime_dispatch.hub.membership.feed import MembershipFeed
from realtime_dispatch.hub.membership.revocation_watch import RevocationWatch
from realtime_dispatch.hub.membership.tracker import MembershipTracker
from realtime_dispatch.hub.metrics import HubMetrics
from realtime_dispatch.hub.signals.hub_signals import wire_signals
from realtime_dispatch.hub.transports.http_connections import HttpTransports
from realtime_dispatch.hub.transports.negotiate import NegotiationStore
from realtime_dispatch.hub.wire.framing import binary_frame, text_frame
from realtime_dispatch.hub.wire.protocol import ProtocolError
from realtime_dispatch.hub.wire.protocols import JSON, HubProtocol
from realtime_dispatch.ids import new_id
from realtime_dispatch.keys import Key
from realtime_dispatch.push import HubPublisher, PublishResult

log = structlog.get_logger(__name__)

HOUSEKEEPING_SLICES = 10
"""Pieces the once-a-tick check of every connection is cut into, spread over the tick."""

PushSource = Literal["local", "backplane"]
LOCAL: PushSource = "local"
BACKPLANE: PushSource = "backplane"
IDLE_TIMEOUT_ERROR = "Server timeout elapsed without receiving a message from the client."

EncodedRun = tuple[list[bytes], list[bytes], bytes]
"""A run of one group's records in one protocol: records, their WebSocket frames, joined."""


@dataclass(frozen=True, slots=True)
class HubOptions:
    """Everything the hub needs to know, as values. The CLI builds them from the settings
    (``realtime_dispatch.cli.serve.hub_options``); the hub never reads settings itself."""

    jwt_secret: str | None = None
    """The HS256 secret; shorthand for ``tokens.secret`` (which wins when both are set)."""
    tokens: TokenOptions | None = None
    """Which tokens are accepted: the secret, an identity provider's JWKS, issuer, audience,
    user claim (``REALTIME_HUB_JWT_*``)."""
    service_key: str | None = None
    backplane_url: str | None = None
    backplane_mode: str = "redis"
    """With ``backplane_url``: ``redis`` (one channel every replica reads) or ``redis-cluster``
    (a sharded channel per group, subscribed by the replicas with members of it)."""
    ping_interval: float = 15.0
    idle_timeout: float = 30.0
    handshake_timeout: float = 15.0
    resume_window: float = 30.0
    """How long a stateful connection whose transport dropped waits for the client to resume."""
    negotiate_ttl: float = 60.0
    max_connections_per_user: int = 50
    """One user's connections on this replica (``REALTIME_HUB_MAX_CONNECTIONS_PER_USER``); also
    how many of the user's negotiations wait for their connection."""
    max_pending_negotiations: int = 10_000
    """Negotiations waiting for their connection, all users together (past it the oldest is
    pushed out)."""
    max_negotiations_per_client: int = 1000
    """Negotiations waiting for their connection from one client address (past it that
    address's oldest is pushed out); 0: no bound. ``REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT``:
    an address cannot use more."""
    barrier_timeout: float = 2.0
    shutdown_grace: float = 2.0
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    typing_interval: float = 2.0
    """At most one ``user_typing`` per (user, chat) per this many seconds
    (``REALTIME_HUB_TYPING_INTERVAL``)."""
    member_chats_sql: str | None = None
    """The projection manifest's ``member_chats`` query (``None``: the shipped one, over the
    reference messenger's participants)."""
    presence_watch_limit: int = 500
    """Watched users per connection (``REALTIME_HUB_PRESENCE_WATCH_LIMIT``)."""
    presence_grace: float = 5.0
    """Seconds a user stays online after their last connection closed
    (``REALTIME_HUB_PRESENCE_GRACE``)."""
    presence_refresh: float = 10.0
    """With the backplane: seconds between two rewrites of this replica's presence claims
    (they expire after three)."""
    presence_blocks: bool = True
    """Leave out of ``WatchPresence`` the users who blocked the caller (the reference
    messenger's blacklist; off on an adopter's schema)."""

    def token_options(self) -> TokenOptions:
        tokens = self.tokens if self.tokens is not None else TokenOptions()
        if tokens.secret is None and self.jwt_secret is not None:
            tokens = dataclasses.replace(tokens, secret=self.jwt_secret)
        return tokens


class Hub:
    def __init__(
        self,
        options: HubOptions,
        *,
        pool: asyncpg.Pool | None,
        dsn: str,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.options = options
        self.metrics_registry = metrics_registry or CollectorRegistry()
        self.metrics = HubMetrics(self.metrics_registry)
        self.http_refusals = HttpRefusals(self.metrics_registry)
        """What the HTTP server in front of this hub refuses (:mod:`.http_protocol`)."""
        self._pushes = {source: self.metrics.pushes.labels(source) for source in (LOCAL, BACKPLANE)}
        """The pushes counter by source, its labelled children looked up once."""
        self._barriers_marked = self.metrics.membership_barriers.labels("marked")
        self._barriers_waited = self.metrics.membership_barriers.labels("round_trip")
        self.keys = options.token_options().keys
        """The owner's key type (``REALTIME_KEY_TYPE``): tokens' user claim, notifications' ids,
        ``Typing``'s chat id and ``user_typing``'s user id."""
        self.registry = GroupRegistry()
        self.tracker = MembershipTracker(self.registry)
        self.revocations = Revocations()
        """Revoked users, kept current from ``NOTIFY realtime_revocation`` on the membership
        feed's connection; the verifier refuses their earlier tokens."""
        self.verifier = TokenVerifier(self.options.token_options(), revocations=self.revocations)
        """The one token check of this hub's transports and of the REST and ops APIs served
        beside it."""
        self.expiry = ExpiryTimer(self._expired)
        """Each connection's token expiry, and the one timer that closes them at ``exp``."""
        self.admission = Admission(self.registry, options.max_connections_per_user)
        self._open_gauge = self.metrics.connections.labels("open")
        self.metrics.connections.labels("handshake").set_function(lambda: self.admission.opening)
        self.negotiations = NegotiationStore(
            options.negotiate_ttl,
            per_user=options.max_connections_per_user,
            per_address=options.max_negotiations_per_client,
            total=options.max_pending_negotiations,
        )
        self.negotiations.on_evicted = self.metrics.negotiations_evicted.inc
        self.connections: dict[str, HubConnection] = {}
        self._by_token: dict[str, HubConnection] = {}
        self._not_json = 0
        """How many connections speak another protocol than JSON (MessagePack)."""
        self.http_transports = HttpTransports()
        """Server-Sent Events and long-polling connections by token (:mod:`.transports`)."""
        self._dsn = dsn
        self._pool = pool
        self._owned_pool: asyncpg.Pool | None = None
        self.revocation_watch = RevocationWatch(self.revocations, self.cut_revoked, self.keys)
        self.membership = MembershipFeed(
            dsn=dsn,
            pool=pool,
            tracker=self.tracker,
            connected_users=self.registry.users,
            member_chats_sql=options.member_chats_sql,
            subscriptions=[self.revocation_watch],
            keys=self.keys,
        )
        self.replica_id = new_id().hex
        """This replica's id on the backplane (its heartbeat, its presence claims, its signals)."""
        self.signals = wire_signals(
            options,
            self.registry,
            self.send_to_members,
            self.metrics,
            replica_id=self.replica_id,
            membership=self.membership,
            publish=self.publish_frames,
            subscribed=self.interest_settled,
            keys=self.keys,
        )
        """Typing and presence (:mod:`.hub_signals`); their hub methods are :attr:`methods`."""
        self.methods = self.signals.methods
        self.tracker.on_change = self.signals.presence.membership_changed
        self.tracker.on_hint = self.signals.presence.hinted
        url = self.options.backplane_url
        from_backplane = self.signals.from_backplane(
            functools.partial(self.deliver, source=BACKPLANE)
        )
        self.backplane: BackplaneSubscriber | ShardedBackplaneSubscriber | None = None
        if url and self.sharded:
            sharded = ShardedBackplaneSubscriber(url, from_backplane, replica_id=self.replica_id)
            self.registry.on_group_change = sharded.group_changed
            self.membership.on_barrier = sharded.barrier
            self.backplane = sharded
        elif url:
            self.backplane = BackplaneSubscriber(url, from_backplane)
        self._publisher: FramePublisher | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.failed = asyncio.Event()
        self.stopping = False
        self._ended = asyncio.Event()
        self._ended.set()

    # lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        if self._pool is None:
            self._owned_pool = await create_pool(self._dsn, min_size=1, max_size=4)
            self.membership.pool = self._owned_pool
        pool = self._pool or self._owned_pool
        assert pool is not None
        try:
            # Revocations in force before any token is checked (a replica that was down reads
            # what it missed); the feed reloads them on every (re)connect of its listener.
            await self.revocation_watch.resync(pool)
            if self.verifier.keys is not None:
                await self.verifier.keys.prefetch()
        except BaseException:
            if self._owned_pool is not None:
                await self._owned_pool.close()
                self._owned_pool = None
            raise
        url = self.options.backplane_url
        if url is not None and self.sharded:
            self._publisher = ShardedRedisHubPublisher(
                url, dsn=self._dsn, barrier_timeout=self.options.barrier_timeout
            )
        elif url is not None:
            self._publisher = RedisHubPublisher(redis_client(url), owns_client=True)
        else:
            self._publisher = InProcessHubPublisher(self.signals.observing(self.deliver))
        self._spawn("membership_feed", self.membership.run())
        self._spawn("housekeeping", self._housekeeping())
        if self.backplane is not None:
            self._spawn("backplane_subscriber", self.backplane.run())
        for name, task in self.signals.tasks():
            self._spawn(name, task)
        log.info("hub_started", backplane=url is not None)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close_connections()
        await self.http_transports.aclose()
        self.expiry.cancel()
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        await self.signals.aclose()
        if self._publisher is not None:
            await self._publisher.aclose()
        if self._owned_pool is not None:
            await self._owned_pool.close()
            self._owned_pool = None
        await self.verifier.aclose()
        log.info("hub_stopped")

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=f"hub:{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._task_done(name, t))

    def _task_done(self, name: str, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        log.error("hub_task_failed", task=name, error=type(error).__name__ if error else "returned")
        self.failed.set()

    @property
    def sharded(self) -> bool:
        return self.options.backplane_mode == "redis-cluster"

    async def interest_settled(self) -> bool:
        """With the interest-routed backplane: wait until this replica is subscribed to every
        group its connections are in (a new connection's chats, say). True at once otherwise."""
        if isinstance(self.backplane, ShardedBackplaneSubscriber):
            return await self.backplane.settled(self.options.barrier_timeout)
        return True

    async def wait_ready(self, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            await self.membership.ready.wait()
            if self.backplane is not None:
                await self.backplane.ready.wait()

    def is_ready(self) -> bool:
        if self.stopping or self.failed.is_set() or not self.membership.ready.is_set():
            return False
        return self.backplane is None or self.backplane.ready.is_set()

    async def close_connections(self) -> None:
        """Send every connection a close message (reconnect allowed) and wait, up to the
        shutdown grace, for them to end. New WebSockets are refused from now on."""
        self.stopping = True
        for connection in list(self.connections.values()):
            if connection.attachment is None:
                self.finalize(connection, CloseReason.SHUTDOWN)
            else:
                connection.close(
                    CloseRequest(CloseReason.SHUTDOWN, "Server is shutting down.", True)
                )
        if self.connections:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.shutdown_grace):
                    await self._ended.wait()

    # publishing ----------------------------------------------------------------------------

    def publisher(self) -> HubPublisher:
        """The dispatcher's publisher: in-process, or Redis when the backplane is on."""
        if self._publisher is None:
            raise RuntimeError("the hub is not started")
        return self._publisher

    async def publish_frames(self, items: GroupFrames) -> list[PublishResult]:
        """Publish serialised records: locally, or through the backplane when it is on."""
        if self._publisher is None:
            raise RuntimeError("the hub is not started")
        return await self._publisher.publish_frames(items)

    async def deliver(
        self, items: GroupFrames, marks: Sequence[str] = (), *, source: PushSource = LOCAL
    ) -> bool:
        """Fan out serialised records to this replica's members, after the membership barrier
        when a chat is among their groups: the one delivery path of pushes made in this process
        (``source`` ``local``, through the in-process publisher) and of pushes received from the
        backplane (``backplane``). ``marks``: the worker's membership marks the pushes carry;
        when the feed has applied one of them, the barrier is already passed.

        False when the barrier could not be passed (the membership feed is down). A local push
        is then not delivered: its publisher reports it unavailable and the dispatcher retries
        it. A push from the backplane is delivered anyway, with a warning: nobody could retry it.
        """
        ordered = not any(group.startswith(CHAT_PREFIX) for group, _ in items)
        if not ordered and marks and self.membership.heard(marks):
            ordered = True
            self._barriers_marked.inc()
        elif not ordered:
            ordered = await self.membership.barrier(self.options.barrier_timeout)
            self._barriers_waited.inc()
        if not ordered:
            if source == LOCAL:
                return False
            log.warning("membership_barrier_timeout", pushes=len(items))
        self.send_to_groups(items)
        self._pushes[source].inc(len(items))
        return ordered

    def send_to_group(self, group: str, record: bytes | str) -> int:
        """Send one serialised record to every member on this replica; returns how many."""
        if isinstance(record, str):
            record = record.encode()
        return self.send_to_groups(((group, record),))

    def send_to_groups(self, items: GroupFrames) -> int:
        """Send serialised records, in order, to their groups' members on this replica.

        Each record is framed once. Consecutive records for the same group are a run: their
        frames are joined once, and every member without stateful reconnect gets the run as that
        one piece. Members speaking another protocol than JSON (MessagePack) get the run
        re-encoded once for all of them. What is due to one connection is written to its
        transport in one call at the end. Returns how many deliveries were made.

        Connections whose token has expired are closed first (one comparison per call, none
        per member), so nothing is delivered to them even if the expiry timer is late; this
        holds for every transport, as a closing connection takes no more records.
        """
        if self.expiry.queue.next_at <= time.time():
            self.expiry.run_due()
        members_of = self.registry.members
        touched: list[HubConnection] = []
        deliveries = 0
        count = len(items)
        start = 0
        while start < count:
            group = items[start][0]
            end = start + 1
            while end < count and items[end][0] == group:
                end += 1
            members = members_of(group)
            if members:
                records = [record for _, record in items[start:end]]
                deliveries += self._offer_run(members, records, touched)
            start = end
        self._flush(touched)
        return deliveries

    def send_to_members(self, members: Sequence[str], record: bytes) -> int:
        """:meth:`send_to_groups` of one record to some of a group's members (``user_typing``:
        every member but the typist's connections)."""
        touched: list[HubConnection] = []
        deliveries = self._offer_run(members, [record], touched)
        self._flush(touched)
        return deliveries

    def _offer_run(
        self, members: Sequence[str], records: list[bytes], touched: list[HubConnection]
    ) -> int:
        frames = [text_frame(record) for record in records]
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        if not self._not_json:  # every connection speaks JSON: no check per member
            connections = self.connections
            for connection_id in members:
                connections[connection_id].offer(records, frames, data, touched)
        else:
            self._offer_mixed(members, records, frames, data, touched)
        return len(members) * len(records)

    def _flush(self, touched: list[HubConnection]) -> None:
        if touched:
            loop_time = asyncio.get_running_loop().time()
            written = 0
            for connection in touched:
                written += connection.flush()
                connection.last_sent = loop_time
            self.metrics.sent_frames.inc(written)

    def _offer_mixed(
        self,
        members: Sequence[str],
        records: list[bytes],
        frames: list[bytes],
        data: bytes,
        touched: list[HubConnection],
    ) -> None:
        """:meth:`send_to_groups` for one run while some connections speak another protocol
        than JSON: the run is re-encoded once per such protocol, on its first member."""
        connections = self.connections
        json_protocol = JSON
        encoded: dict[HubProtocol, EncodedRun | None] = {}
        last: HubProtocol | None = None
        run: EncodedRun | None = None
        for connection_id in members:
            connection = connections[connection_id]
            protocol = connection.protocol
            if protocol is json_protocol:
                connection.offer(records, frames, data, touched)
                continue
            if protocol is not last:
                if protocol not in encoded:
                    encoded[protocol] = _encode_run(protocol, records)
                last, run = protocol, encoded[protocol]
            if run is not None:
                connection.offer(run[0], run[1], run[2], touched)

    def _count_sent(self, records: int) -> None:
        self.metrics.sent_frames.inc(records)

    # connections ---------------------------------------------------------------------------

    def admit_connection(self, user_id: Key, stage: AdmissionStage) -> Reservation:
        """The admission check of every transport: call it when a connection is negotiated
        (``negotiate``) and when one is opened (``open``, before accepting it; pass the
        reservation to :meth:`new_connection`, or release it if the connection never gets
        there). Raises :class:`~.admission.ConnectionRefused` (its ``status`` is the HTTP
        answer) when the user is at ``max_connections_per_user`` on this replica."""
        try:
            return self.admission.admit(user_id, stage)
        except ConnectionRefused as exc:
            self.metrics.refused.labels(exc.code).inc()
            log.info("hub_connection_refused", code=exc.code, stage=stage)
            raise

    def new_connection(
        self, connection: HubConnection, reservation: Reservation | None = None
    ) -> None:
        """Register a connection (its place, reserved at ``open``, becomes the registered one)."""
        if reservation is not None:
            reservation.release()
        self.connections[connection.connection_id] = connection
        self._by_token[connection.token] = connection
        self.registry.add_connection(connection.connection_id, connection.user_id)
        self.registry.join(connection.connection_id, user_group(connection.user_id))
        connection.invoke = self.methods.invoke
        self.signals.presence.connected(connection.user_id)
        if connection.protocol is not JSON:
            self._not_json += 1
        self.expiry.track(connection.connection_id, connection.identity.expires_at)
        self._open_gauge.inc()
        self._ended.clear()
        if self.revocations.refuses(connection.identity):  # revoked while it was opening
            connection.close(TOKEN_REVOKED)

    def reidentify(self, connection: HubConnection, identity: Identity) -> None:
        """A resumed connection's fresher token (same user): its expiry moves with it."""
        connection.identity = identity
        self.expiry.track(connection.connection_id, connection.identity.expires_at)

    # expiry and revocation -----------------------------------------------------------------

    def _expired(self, connection_id: str, now: float) -> None:
        connection = self.connections.get(connection_id)
        if connection is not None and connection.identity.expired(now):
            self._end(connection, TOKEN_EXPIRED)

    def cut_revoked(self, user_id: Key) -> int:
        """Close ``user_id``'s connections whose token the revocations now refuse; returns how
        many."""
        cut = 0
        for connection_id in self.registry.connections_of(user_id):
            connection = self.connections.get(connection_id)
            if connection is not None and self.revocations.refuses(connection.identity):
                self._end(connection, TOKEN_REVOKED)
                cut += 1
        if cut:
            log.info("hub_user_revoked", connections=cut)
        return cut

    def _end(self, connection: HubConnection, request: CloseRequest) -> None:
        """Close a connection with ``request``'s close message (sent once it is attached, for
        one still opening); forget one waiting to resume at once."""
        if connection.attachment is None and connection.detached_at is not None:
            self.finalize(connection, request.reason)
        else:
            connection.close(request)

    def resumable(self, token: str | None, user_id: Key) -> HubConnection | None:
        if token is None:
            return None
        connection = self._by_token.get(token)
        if (
            connection is None
            or not connection.stateful
            or connection.user_id != user_id
            or connection.closing is not None
        ):
            return None
        return connection

    def finalize(self, connection: HubConnection, reason: CloseReason) -> None:
        if self.connections.pop(connection.connection_id, None) is None:
            return
        self._by_token.pop(connection.token, None)
        self.signals.presence.leaving(connection.connection_id, connection.user_id)
        self.registry.remove_connection(connection.connection_id)
        if connection.protocol is not JSON:
            self._not_json -= 1
        self.expiry.forget(connection.connection_id)
        self._open_gauge.dec()
        self.metrics.disconnects.labels(reason.value).inc()
        log.info("hub_disconnected", connection_id=connection.connection_id, reason=reason.value)
        if not self.connections:
            self._ended.set()

    def connection_limits(self) -> ConnectionLimits:
        return self.options.limits

    def sent_counter(self) -> Callable[[int], None]:
        return self._count_sent

    async def _housekeeping(self) -> None:
        """Every ``tick``: each connection checked once (its ping, idle timeout, resume window),
        in ``HOUSEKEEPING_SLICES`` slices spread over the tick, so that a replica holding many
        connections does not stall its pushes behind one long walk and a burst of pings."""
        options = self.options
        tick = min(1.0, options.ping_interval / 3, options.idle_timeout / 3)
        loop = asyncio.get_running_loop()
        while True:
            connections = list(self.connections.values())  # opened since: the next round's
            size = max(1, -(-len(connections) // HOUSEKEEPING_SLICES))
            for part in range(HOUSEKEEPING_SLICES):
                await asyncio.sleep(tick / HOUSEKEEPING_SLICES)
                now = loop.time()
                if part == 0:
                    self.negotiations.sweep(now)
                    self.http_transports.sweep(now, self.options.handshake_timeout)
                for connection in connections[part * size : (part + 1) * size]:
                    if self.connections.get(connection.connection_id) is connection:
                        self._check(connection, now)

    def _check(self, connection: HubConnection, now: float) -> None:
        options = self.options
        if connection.attachment is None:
            detached = connection.detached_at
            if connection.closing is not None and detached is not None:
                self.finalize(connection, connection.closing.reason)  # e.g. overflowed while away
            elif detached is not None and now - detached > options.resume_window:
                self.finalize(connection, CloseReason.RESUME_EXPIRED)
            return
        if connection.closing is not None:
            return
        if now - connection.last_received > options.idle_timeout:
            connection.close(CloseRequest(CloseReason.IDLE_TIMEOUT, IDLE_TIMEOUT_ERROR))
        elif now - connection.last_sent >= options.ping_interval:
            connection.last_sent = now
            connection.send_control(connection.protocol.ping)


def _encode_run(protocol: HubProtocol, records: list[bytes]) -> EncodedRun | None:
    """A run of JSON records in ``protocol``, framed as binary WebSocket frames; None (logged)
    when a record has no equivalent there."""
    if protocol.from_json is None:
        raise ValueError(f"{protocol.name} records are JSON records")
    try:
        encoded = protocol.from_json(records)
    except ProtocolError as exc:
        log.warning("hub_push_not_encodable", protocol=protocol.name, code=exc.code)
        return None
    frame = binary_frame if protocol.binary else text_frame
    frames = [frame(record) for record in encoded]
    return encoded, frames, frames[0] if len(frames) == 1 else b"".join(frames)
