"""What the transports use of the hub that serves them: :class:`TransportHost`.

A transport is handed the :class:`~realtime_dispatch.hub.Hub`, but names only this: the few
attributes and calls it uses (the options it reads, the token check, the stores of negotiations
and of HTTP connections, a connection's admission, registration, resumption and end). The Hub
satisfies it as it is, so the transports sit below the runtime that composes them and import
nothing above them, annotations included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client import Counter

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub.connections.caps import AdmissionStage, Reservation
from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
from realtime_dispatch.hub.connections.session import CloseReason
from realtime_dispatch.hub.transports.http_connections import HttpTransports
from realtime_dispatch.hub.transports.negotiate import NegotiationStore
from realtime_dispatch.values.keys import Key


class TransportOptions(Protocol):
    """The options a transport reads (the hub's :class:`~realtime_dispatch.hub.HubOptions`)."""

    @property
    def limits(self) -> ConnectionLimits: ...

    @property
    def handshake_timeout(self) -> float: ...


class TokenCheck(Protocol):
    """The one token check (:class:`~realtime_dispatch.auth.tokens.TokenVerifier`)."""

    async def verify(self, token: str | None) -> Identity: ...


class ConnectionLoads(Protocol):
    """A registered connection joined to its user's chats (the hub's membership feed)."""

    async def load_connection(self, connection_id: str, user_id: Key) -> None: ...


class TransportMetrics(Protocol):
    """The hub's metrics a transport counts on its own."""

    @property
    def disconnects(self) -> Counter: ...


class TransportHost(Protocol):
    """What the transports use of the :class:`~realtime_dispatch.hub.Hub` that serves them."""

    @property
    def options(self) -> TransportOptions: ...

    @property
    def verifier(self) -> TokenCheck: ...

    @property
    def membership(self) -> ConnectionLoads: ...

    @property
    def metrics(self) -> TransportMetrics: ...

    @property
    def negotiations(self) -> NegotiationStore: ...

    @property
    def http_transports(self) -> HttpTransports: ...

    @property
    def stopping(self) -> bool:
        """The hub shuts down: new connections are refused."""
        ...

    def admit_connection(self, user_id: Key, stage: AdmissionStage) -> Reservation: ...

    def new_connection(
        self, connection: HubConnection, reservation: Reservation | None = None
    ) -> None: ...

    def resumable(self, token: str | None, user_id: Key) -> HubConnection | None: ...

    def reidentify(self, connection: HubConnection, identity: Identity) -> None: ...

    def finalize(self, connection: HubConnection, reason: CloseReason) -> None: ...

    def sent_counter(self) -> Callable[[int], None]: ...

    async def interest_settled(self) -> bool: ...
