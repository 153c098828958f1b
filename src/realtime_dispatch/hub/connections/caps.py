"""Who may hold another hub connection: :class:`Admission`, the per-user cap every transport goes
through, once when a connection is negotiated and once when it is opened (then
:func:`~.admission.admit` registers it).

A user holds at most ``max_per_user`` connections on this replica: the registered ones (the
:class:`~.registry.GroupRegistry` counts them) plus those being opened right now, whose place is
reserved at ``open`` so that many upgrades in flight together cannot all pass the check before
any of them registers. The cap is per replica: a user spread over N replicas may hold N times
it (docs/reference.md, ``REALTIME_HUB_MAX_CONNECTIONS_PER_USER``).
"""

from __future__ import annotations

from typing import Literal

import structlog
from prometheus_client import Counter

from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)

AdmissionStage = Literal["negotiate", "open"]


class ConnectionRefused(RealtimeDispatchError):
    """A connection that may not be made now; ``status`` is the HTTP answer (429 or 503)."""

    code = "ConnectionRefused"

    def __init__(self, message: str, *, code: str, status: int) -> None:
        super().__init__(message, code=code)
        self.status = status


class Reservation:
    """A place held for a connection being opened; the hub consumes it when the connection
    registers. :meth:`release` gives it back if the connection never registers (idempotent)."""

    __slots__ = ("_admission", "_held", "user_id")

    def __init__(self, admission: Admission, user_id: Key, *, held: bool) -> None:
        self._admission = admission
        self.user_id = user_id
        self._held = held

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission.unreserve(self.user_id)


class Admission:
    __slots__ = ("_opening", "_refused", "_registry", "max_per_user", "opening")

    def __init__(
        self, registry: GroupRegistry, max_per_user: int, *, refused: Counter | None = None
    ) -> None:
        self._registry = registry
        self.max_per_user = max_per_user
        self._refused = refused
        """The refusals by code (``messenger_realtime_hub_refused_connections``)."""
        self._opening: dict[Key, int] = {}
        self.opening = 0
        """Places reserved, all users together: connections whose handshake has not finished
        (a WebSocket from its upgrade, an SSE stream or long poll from its first ``GET``)."""

    def held_by(self, user_id: Key) -> int:
        return self._registry.connection_count(user_id) + self._opening.get(user_id, 0)

    def admit(self, user_id: Key, stage: AdmissionStage) -> Reservation:
        """The admission check of every transport (the hub's ``admit_connection``): call it
        when a connection is negotiated (``negotiate``) and when one is opened (``open``, before
        accepting it; pass the reservation to the hub's ``new_connection``, or release it if
        the connection never gets there). Raises :class:`ConnectionRefused` (429, its ``status``
        is the HTTP answer), counted and logged, when the user is at ``max_per_user`` on this
        replica already. At ``open`` a place is reserved; at ``negotiate`` nothing is (the
        reservation is empty)."""
        if self.held_by(user_id) >= self.max_per_user:
            code = "TooManyConnections"
            if self._refused is not None:
                self._refused.labels(code).inc()
            log.info("hub_connection_refused", code=code, stage=stage)
            raise ConnectionRefused(
                f"Too many connections for this user (at most {self.max_per_user}).",
                code=code,
                status=429,
            )
        if stage == "negotiate":
            return Reservation(self, user_id, held=False)
        self._opening[user_id] = self._opening.get(user_id, 0) + 1
        self.opening += 1
        return Reservation(self, user_id, held=True)

    def unreserve(self, user_id: Key) -> None:
        self.opening -= 1
        count = self._opening.get(user_id, 0) - 1
        if count > 0:
            self._opening[user_id] = count
        else:
            self._opening.pop(user_id, None)
