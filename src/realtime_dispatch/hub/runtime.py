"""The :class:`Hub`: the parts of a hub put together, and their explicit async lifecycle.

::

    async with Hub(HubOptions(jwt_secret=secret), pool=pool, dsn=dsn) as hub:
        app = Starlette(routes=hub_routes(hub))      # or mount them beside other routes
        publisher = hub.publisher()                  # a HubPublisher for the dispatcher

Nothing happens in ``__init__`` beyond building values; ``__aenter__`` starts the tasks and
``__aexit__`` closes every connection (with a close message) and stops them.

The parts, each with its concern (``docs/hub.md``): the connections and their lifetimes
(:class:`~.connections.lifetime.Lifetimes`: registration, expiry, revocation, idle timeout,
resume window), the fan-out (:class:`~.connections.fanout.Fanout`), the membership feed and the
delivery ordered after it (:class:`~.membership.ordering.OrderedDelivery`), the backplane
(:mod:`.backplane.choice`), the live signals (:mod:`.signals.hub_signals`), the transports'
negotiations and HTTP connections, and the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog
from prometheus_client import CollectorRegistry

from realtime_dispatch.auth.revocations import Revocations
from realtime_dispatch.auth.tokens import TokenOptions, TokenVerifier
from realtime_dispatch.database.connections import close_pool, create_pool
from realtime_dispatch.delivery.push import HubPublisher, PublishResult
from realtime_dispatch.edge.http_refusals import HttpRefusals
from realtime_dispatch.hub.backplane import choice
from realtime_dispatch.hub.backplane.publishers import FramePublisher
from realtime_dispatch.hub.connections.caps import (
    Admission,
)
from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
from realtime_dispatch.hub.connections.fanout import Fanout, GroupFrames
from realtime_dispatch.hub.connections.lifetime import Lifetimes
from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.membership.feed import MembershipFeed
from realtime_dispatch.hub.membership.ordering import BACKPLANE, OrderedDelivery
from realtime_dispatch.hub.membership.revocation_watch import RevocationWatch
from realtime_dispatch.hub.membership.tracker import MembershipTracker
from realtime_dispatch.hub.metrics import HubMetrics
from realtime_dispatch.hub.signals.hub_signals import wire_signals
from realtime_dispatch.hub.transports.http_connections import HttpTransports
from realtime_dispatch.hub.transports.negotiate import NegotiationStore, worker_prefix
from realtime_dispatch.values.ids import new_id

log = structlog.get_logger(__name__)


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
    presence_chats_sql: str | None = None
    """The projection manifest's ``presence_chats`` query: the chats through which a user's
    presence shows (consent). ``None``: every active chat (``member_chats``)."""
    presence_watch_limit: int = 500
    """Watched users per connection (``REALTIME_HUB_PRESENCE_WATCH_LIMIT``)."""
    presence_grace: float = 5.0
    """Seconds a user stays online after their last connection closed
    (``REALTIME_HUB_PRESENCE_GRACE``)."""
    presence_refresh: float = 10.0
    """With the backplane: seconds between two rewrites of this replica's presence claims
    (they expire after three)."""
    worker: int | None = None
    """This hub's index among the workers of ``--workers N`` (None: it is no worker): its
    negotiations' tokens name it (:func:`~.transports.negotiate.worker_prefix`)."""
    presence_blocks: bool = True
    """The reference messenger's blacklist (off on an adopter's schema): leave out of
    ``WatchPresence`` the users who blocked the caller, and refuse ``Typing`` where a message
    would be refused (one query per pass of the typing interval)."""

    def token_options(self) -> TokenOptions:
        tokens = self.tokens if self.tokens is not None else TokenOptions()
        if tokens.secret is None and self.jwt_secret is not None:
            tokens = dataclasses.replace(tokens, secret=self.jwt_secret)
        return tokens


class BackgroundTasks:
    """The hub's background tasks by name. One that ends while the hub runs (it failed, or
    returned) sets :attr:`failed`: the hub is then not ready, and its server stops."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.failed = asyncio.Event()

    def spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=f"hub:{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._done(name, t))

    def _done(self, name: str, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        log.error("hub_task_failed", task=name, error=type(error).__name__ if error else "returned")
        self.failed.set()

    async def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()


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
        """What the HTTP server in front of this hub refuses
        (:mod:`~realtime_dispatch.edge.http_protocol`)."""
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
        self.lifetimes = Lifetimes(
            self.registry,
            self.revocations,
            ping_interval=options.ping_interval,
            idle_timeout=options.idle_timeout,
            resume_window=options.resume_window,
            open_gauge=self.metrics.connections.labels("open"),
            disconnects=self.metrics.disconnects,
        )
        self.lifetimes.sweep = self._sweep
        self.connections: dict[str, HubConnection] = self.lifetimes.connections
        self.expiry = self.lifetimes.expiry
        # What the transports call of a connection's lifetime: the lifetimes' own methods.
        self.new_connection = self.lifetimes.add
        self.reidentify = self.lifetimes.reidentify
        self.resumable = self.lifetimes.resumable
        self.finalize = self.lifetimes.finalize
        self.cut_revoked = self.lifetimes.cut_revoked
        self.fanout = Fanout(self.lifetimes, self.registry, self.metrics.sent_frames)
        self.send_to_group = self.fanout.send_to_group
        self.send_to_groups = self.fanout.send_to_groups
        self.send_to_members = self.fanout.send_to_members
        self.admission = Admission(
            self.registry, options.max_connections_per_user, refused=self.metrics.refused
        )
        self.admit_connection = self.admission.admit
        self.metrics.connections.labels("handshake").set_function(lambda: self.admission.opening)
        self.negotiations = NegotiationStore(
            options.negotiate_ttl,
            per_user=options.max_connections_per_user,
            per_address=options.max_negotiations_per_client,
            total=options.max_pending_negotiations,
            prefix=worker_prefix(options.worker),
        )
        self.negotiations.on_evicted = self.metrics.negotiations_evicted.inc
        self.http_transports = HttpTransports()
        """Server-Sent Events and long-polling connections by token (:mod:`.transports`)."""
        self._dsn = dsn
        self._pool = pool
        self._owned = contextlib.AsyncExitStack()
        """What the hub opened itself (the pool, when it is given none), closed at its exit."""
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
        self.delivery = OrderedDelivery(
            self.membership,
            self.fanout.send_to_groups,
            self.metrics,
            barrier_timeout=options.barrier_timeout,
        )
        self.deliver = self.delivery.deliver
        """Fan out after the membership barrier (:meth:`.ordering.OrderedDelivery.deliver`)."""
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
        """Typing and presence (:mod:`.signals.hub_signals`); their hub methods are
        :attr:`methods`."""
        self.methods = self.signals.methods
        self.lifetimes.opened, self.lifetimes.closed = self.signals.opened, self.signals.closed
        self.tracker.on_change = self.signals.presence.membership_changed
        self.tracker.on_hint = self.signals.presence.hinted
        self.backplane = choice.subscriber(
            options.backplane_url,
            options.backplane_mode,
            self.signals.from_backplane(functools.partial(self.delivery.deliver, source=BACKPLANE)),
            replica_id=self.replica_id,
            registry=self.registry,
            membership=self.membership,
        )
        self._publisher: FramePublisher | None = None
        self.tasks = BackgroundTasks()
        self.failed = self.tasks.failed
        self.stopping = False

    # lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        async with contextlib.AsyncExitStack() as owned:  # closed here if starting fails
            if self._pool is None:
                self.membership.pool = await create_pool(
                    self._dsn, min_size=1, max_size=4, stateless=True
                )
                owned.push_async_callback(close_pool, self.membership.pool)
            assert self.membership.pool is not None
            # Revocations in force before any token is checked (a replica that was down reads
            # what it missed); the feed reloads them on every (re)connect of its listener.
            await self.revocation_watch.resync(self.membership.pool)
            if self.verifier.keys is not None:
                await self.verifier.keys.prefetch()
            self._owned = owned.pop_all()
        options = self.options
        self._publisher = choice.publisher(
            options.backplane_url,
            options.backplane_mode,
            self.signals.observing(self.delivery.deliver),
            dsn=self._dsn,
            barrier_timeout=options.barrier_timeout,
        )
        self.tasks.spawn("membership_feed", self.membership.run())
        self.tasks.spawn("housekeeping", self.lifetimes.run())
        if self.backplane is not None:
            self.tasks.spawn("backplane_subscriber", self.backplane.run())
        for name, task in self.signals.tasks():
            self.tasks.spawn(name, task)
        log.info("hub_started", backplane=options.backplane_url is not None)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close_connections()
        await self.http_transports.aclose()
        self.expiry.cancel()
        await self.tasks.cancel()
        await self.signals.aclose()
        if self._publisher is not None:
            await self._publisher.aclose()
        await self._owned.aclose()
        await self.verifier.aclose()
        log.info("hub_stopped")

    @property
    def sharded(self) -> bool:
        return self.options.backplane_mode == choice.SHARDED

    async def interest_settled(self) -> bool:
        """:func:`.backplane.choice.interest_settled` of this hub's subscriber."""
        return await choice.interest_settled(self.backplane, self.options.barrier_timeout)

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
        await self.lifetimes.close_all(self.options.shutdown_grace)

    # publishing ----------------------------------------------------------------------------

    def publisher(self) -> HubPublisher:
        """The dispatcher's publisher: in-process, or Redis when the backplane is on."""
        if self._publisher is None:
            raise RuntimeError("the hub is not started")
        return self._publisher

    async def publish_frames(
        self, items: GroupFrames, marks: Sequence[str] = ()
    ) -> list[PublishResult]:
        """Publish serialised records: locally, or through the backplane when it is on.
        ``marks``: the membership marks they came with from another process (none: ``()``)."""
        if self._publisher is None:
            raise RuntimeError("the hub is not started")
        return await self._publisher.publish_frames(items, marks)

    # connections ---------------------------------------------------------------------------

    def connection_limits(self) -> ConnectionLimits:
        return self.options.limits

    def sent_counter(self) -> Callable[[int], None]:
        return self.fanout.count_sent

    def _sweep(self, now: float) -> None:
        self.negotiations.sweep(now)
        self.http_transports.sweep(now, self.options.handshake_timeout)
