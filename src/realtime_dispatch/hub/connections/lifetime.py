"""The hub's connections on this replica, from registration to the end: :class:`Lifetimes`.

A connection is registered once opened (:meth:`Lifetimes.add`) and forgotten once it ended
(:meth:`Lifetimes.finalize`). In between it is closed by the hub for one of four reasons:

* its token expired (the :class:`~.expiry.ExpiryTimer`, or the fan-out seeing the earliest
  expiry pass);
* its user's tokens were revoked (:meth:`Lifetimes.cut_revoked`, called by the revocation
  watch of the membership feed);
* nothing was received from it for the idle timeout, or a stateful connection whose transport
  dropped was not resumed within the resume window (the housekeeping, :meth:`Lifetimes.run`,
  which also pings connections that were sent nothing for the ping interval);
* the hub is stopping (:meth:`Lifetimes.close_all`).

What else happens when a connection comes and goes (presence, the hub methods it may invoke) is
the hub's, through the ``opened`` and ``closed`` hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import structlog
from prometheus_client import Counter, Gauge

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.revocations import Revocations
from realtime_dispatch.hub.connections.caps import Reservation
from realtime_dispatch.hub.connections.connection import (
    TOKEN_EXPIRED,
    TOKEN_REVOKED,
    HubConnection,
)
from realtime_dispatch.hub.connections.expiry import ExpiryTimer
from realtime_dispatch.hub.connections.registry import GroupRegistry, user_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.wire.protocols import JSON
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)

HOUSEKEEPING_SLICES = 10
"""Pieces the once-a-tick check of every connection is cut into, spread over the tick."""

IDLE_TIMEOUT_ERROR = "Server timeout elapsed without receiving a message from the client."

SHUTDOWN = CloseRequest(CloseReason.SHUTDOWN, "Server is shutting down.", True)


def _nothing(connection: HubConnection, reason: CloseReason | None = None) -> None:
    return None


@dataclass(eq=False)
class Lifetimes:
    registry: GroupRegistry
    revocations: Revocations
    _: KW_ONLY
    ping_interval: float
    idle_timeout: float
    resume_window: float
    open_gauge: Gauge
    """``messenger_realtime_hub_connections{state="open"}``."""
    disconnects: Counter
    """The connections ended, by reason."""
    connections: dict[str, HubConnection] = field(init=False, default_factory=dict)
    """The registered connections by id: the one dict the hub and its fan-out read."""
    _by_token: dict[str, HubConnection] = field(init=False, default_factory=dict)
    not_json: int = field(init=False, default=0)
    """How many connections speak another protocol than JSON (MessagePack)."""
    expiry: ExpiryTimer = field(init=False)
    """Each connection's token expiry, and the one timer that closes them at ``exp``."""
    ended: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    """Set while no connection is registered."""
    opened: Callable[[HubConnection], None] = field(init=False, default=_nothing)
    """Called for a connection once registered (in the registry and its user's group)."""
    closed: Callable[[HubConnection, CloseReason], None] = field(init=False, default=_nothing)
    """Called for a connection being forgotten, while it is still in the registry."""
    sweep: Callable[[float], None] = field(init=False, default=lambda now: None)
    """Called once per housekeeping tick, with the loop's time (the transports' sweeps)."""

    def __post_init__(self) -> None:
        self.expiry = ExpiryTimer(self._expired)
        self.ended.set()

    # registration --------------------------------------------------------------------------

    def add(self, connection: HubConnection, reservation: Reservation | None = None) -> None:
        """Register a connection (its place, reserved at ``open``, becomes the registered one)."""
        if reservation is not None:
            reservation.release()
        self.connections[connection.connection_id] = connection
        self._by_token[connection.token] = connection
        self.registry.add_connection(connection.connection_id, connection.user_id)
        self.registry.join(connection.connection_id, user_group(connection.user_id))
        self.opened(connection)
        if connection.protocol is not JSON:
            self.not_json += 1
        self.expiry.track(connection.connection_id, connection.identity.expires_at)
        self.open_gauge.inc()
        self.ended.clear()
        if self.revocations.refuses(connection.identity):  # revoked while it was opening
            connection.close(TOKEN_REVOKED)

    def reidentify(self, connection: HubConnection, identity: Identity) -> None:
        """A resumed connection's fresher token (same user): its expiry moves with it."""
        connection.identity = identity
        self.expiry.track(connection.connection_id, connection.identity.expires_at)

    def resumable(self, token: str | None, user_id: Key) -> HubConnection | None:
        """The stateful connection of ``user_id`` with this connection token, still open."""
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
        """Forget a connection that ended (once; again is a no-op)."""
        if self.connections.pop(connection.connection_id, None) is None:
            return
        self._by_token.pop(connection.token, None)
        self.closed(connection, reason)
        self.registry.remove_connection(connection.connection_id)
        if connection.protocol is not JSON:
            self.not_json -= 1
        self.expiry.forget(connection.connection_id)
        self.open_gauge.dec()
        self.disconnects.labels(reason.value).inc()
        log.info("hub_disconnected", connection_id=connection.connection_id, reason=reason.value)
        if not self.connections:
            self.ended.set()

    # the hub's reasons to end a connection -------------------------------------------------

    def _expired(self, connection_id: str, now: float) -> None:
        connection = self.connections.get(connection_id)
        if connection is not None and connection.identity.expired(now):
            self.end(connection, TOKEN_EXPIRED)

    def cut_revoked(self, user_id: Key) -> int:
        """Close ``user_id``'s connections whose token the revocations now refuse; returns how
        many."""
        cut = 0
        for connection_id in self.registry.connections_of(user_id):
            connection = self.connections.get(connection_id)
            if connection is not None and self.revocations.refuses(connection.identity):
                self.end(connection, TOKEN_REVOKED)
                cut += 1
        if cut:
            log.info("hub_user_revoked", connections=cut)
        return cut

    def end(self, connection: HubConnection, request: CloseRequest) -> None:
        """Close a connection with ``request``'s close message (sent once it is attached, for
        one still opening); forget one waiting to resume at once."""
        if connection.attachment is None and connection.detached_at is not None:
            self.finalize(connection, request.reason)
        else:
            connection.close(request)

    async def close_all(self, grace: float) -> None:
        """Send every connection a close message (reconnect allowed) and wait, up to ``grace``
        seconds, for them to end."""
        for connection in list(self.connections.values()):
            if connection.attachment is None:
                self.finalize(connection, CloseReason.SHUTDOWN)
            else:
                connection.close(SHUTDOWN)
        if self.connections:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self.ended.wait()

    # housekeeping --------------------------------------------------------------------------

    async def run(self) -> None:
        """Every ``tick``: each connection checked once (its ping, idle timeout, resume window),
        in ``HOUSEKEEPING_SLICES`` slices spread over the tick, so that a replica holding many
        connections does not stall its pushes behind one long walk and a burst of pings."""
        tick = min(1.0, self.ping_interval / 3, self.idle_timeout / 3)
        loop = asyncio.get_running_loop()
        while True:
            connections = list(self.connections.values())  # opened since: the next round's
            size = max(1, -(-len(connections) // HOUSEKEEPING_SLICES))
            for part in range(HOUSEKEEPING_SLICES):
                await asyncio.sleep(tick / HOUSEKEEPING_SLICES)
                now = loop.time()
                if part == 0:
                    self.sweep(now)
                for connection in connections[part * size : (part + 1) * size]:
                    if self.connections.get(connection.connection_id) is connection:
                        self.check(connection, now)

    def check(self, connection: HubConnection, now: float) -> None:
        if connection.attachment is None:
            detached = connection.detached_at
            if connection.closing is not None and detached is not None:
                self.finalize(connection, connection.closing.reason)  # e.g. overflowed while away
            elif detached is not None and now - detached > self.resume_window:
                self.finalize(connection, CloseReason.RESUME_EXPIRED)
            return
        if connection.closing is not None:
            return
        if now - connection.last_received > self.idle_timeout:
            connection.close(CloseRequest(CloseReason.IDLE_TIMEOUT, IDLE_TIMEOUT_ERROR))
        elif now - connection.last_sent >= self.ping_interval:
            connection.last_sent = now
            connection.send_control(connection.protocol.ping)
