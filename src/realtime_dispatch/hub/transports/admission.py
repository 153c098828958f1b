"""Opening a connection: the one admission point of every transport.

* :class:`~.caps.Admission`, the per-user cap, is checked once when a connection is negotiated and
  once when it is opened. A user holds at most ``max_per_user`` connections on this replica:
  the registered ones (the :class:`~.registry.GroupRegistry` counts them) plus those being
  opened right now, whose place is reserved at ``open`` so that many upgrades in flight
  together cannot all pass the check before any of them registers. The cap is per replica: a
  user spread over N replicas may hold N times it (docs/reference.md,
  ``REALTIME_HUB_MAX_CONNECTIONS_PER_USER``).
* :func:`admit`: WebSockets (:mod:`.endpoint`), Server-Sent Events and long polling
  (:mod:`.transports`) all call it after a good handshake and before they answer it, with the
  place reserved at ``open``. It builds the :class:`~.connection.HubConnection`, registers it
  (``user:{id}``), joins its chats from PostgreSQL and waits until the backplane carries them;
  a refusal raises :class:`AdmissionRefused`, and the caller answers the handshake with its
  error.
"""

from __future__ import annotations

import asyncio

import structlog

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.database.connections import DB_ERRORS
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.hub.connections.caps import Reservation
from realtime_dispatch.hub.connections.connection import HubConnection
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import CloseReason, InboundSession
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.wire.protocols import Transport

log = structlog.get_logger(__name__)


UNAVAILABLE_ERROR = "Service unavailable, try again later."


class AdmissionRefused(RealtimeDispatchError):
    """The connection is not opened; ``str(exc)`` is the handshake error the client gets."""

    code = "AdmissionRefused"


async def admit(
    hub: TransportHost,
    *,
    connection_id: str,
    token: str,
    identity: Identity,
    session: InboundSession,
    transport: Transport,
    reservation: Reservation | None = None,
) -> HubConnection:
    """Open, register and join the groups of a connection whose handshake ``session`` read,
    for the verified ``identity``. :meth:`~.runtime.Hub.new_connection` tracks its token's
    expiry and closes it at once if its user was revoked meanwhile (the close message goes out
    right after the handshake's answer). ``reservation``: the place :meth:`~.caps.Admission.admit`
    held for it at ``open``, which registering consumes."""
    limits = hub.options.limits
    connection = HubConnection(
        connection_id=connection_id,
        token=token,
        identity=identity,
        session=session,
        outbound=Outbound(
            stateful=session.stateful,
            max_pending=limits.max_pending,
            max_replay_chars=limits.max_replay_chars,
        ),
        limits=limits,
        on_sent=hub.sent_counter(),
        now=asyncio.get_running_loop().time(),
        transport=transport,
    )
    hub.new_connection(connection, reservation)
    try:
        await hub.membership.load_connection(connection_id, identity.user_id)
        if not await hub.interest_settled():
            raise TimeoutError("backplane subscriptions not settled")
    except DB_ERRORS as exc:
        log.warning("hub_membership_load_failed", error=type(exc).__name__)
        hub.finalize(connection, CloseReason.SERVER_ERROR)
        raise AdmissionRefused(UNAVAILABLE_ERROR, code="MembershipUnavailable") from exc
    except BaseException:  # the client went away meanwhile (cancelled)
        hub.finalize(connection, CloseReason.TRANSPORT_LOST)
        raise
    log.info(
        "hub_connected",
        connection_id=connection_id,
        transport=transport.value,
        protocol=connection.protocol.name,
        version=session.handshake.version if session.handshake else None,
        stateful=connection.stateful,
    )
    return connection
