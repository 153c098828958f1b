"""``POST /hubs/messenger/negotiate``: hands out a connection id and token, and remembers them
(with the user and whether stateful reconnect was asked for) until the transport arrives: a
WebSocket, a Server-Sent Events stream or a first long poll (all three are listed).

The store is bounded: a user's negotiations past ``per_user`` push out that user's oldest (a
client that negotiates and never connects only pushes out its own), and past ``total`` a new
one is refused (503) until some are used or expire."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from uuid import UUID

from realtime_dispatch.hub.caps import ConnectionRefused
from realtime_dispatch.hub.wire import Transport
from realtime_dispatch.push import JsonObject, JsonValue

AVAILABLE_TRANSPORTS: list[JsonValue] = [
    {"transport": t.value, "transferFormats": list[JsonValue](t.transfer_formats)}
    for t in Transport
]


@dataclass(frozen=True, slots=True)
class Negotiation:
    connection_id: str
    token: str
    user_id: UUID
    stateful: bool
    expires_at: float


def new_connection_id() -> str:
    return secrets.token_urlsafe(16)


class NegotiationStore:
    """Negotiations not yet used by a WebSocket; each lives ``ttl`` seconds. Dicts keep
    insertion order, which is expiry order (one ``ttl`` for all, a monotonic clock)."""

    __slots__ = ("_by_id", "_by_token", "_by_user", "_per_user", "_total", "_ttl")

    def __init__(self, ttl: float, *, per_user: int = 50, total: int = 10_000) -> None:
        self._ttl = ttl
        self._per_user = per_user
        self._total = total
        self._by_token: dict[str, Negotiation] = {}
        self._by_id: dict[str, str] = {}
        self._by_user: dict[UUID, dict[str, None]] = {}
        """Each user's tokens, oldest first."""

    def __len__(self) -> int:
        return len(self._by_token)

    def pending_for(self, user_id: UUID) -> int:
        return len(self._by_user.get(user_id, ()))

    def create(self, user_id: UUID, *, stateful: bool, now: float) -> Negotiation:
        """A new negotiation; :class:`ConnectionRefused` (503) when the store is full."""
        self.sweep(now)
        mine = self._by_user.setdefault(user_id, {})
        while len(mine) >= self._per_user:
            self._forget(self._by_token[next(iter(mine))])
        if len(self._by_token) >= self._total:
            if not mine:
                del self._by_user[user_id]
            raise ConnectionRefused(
                "Too many pending negotiations, try again later.",
                code="TooManyNegotiations",
                status=503,
            )
        negotiation = Negotiation(
            connection_id=new_connection_id(),
            token=secrets.token_urlsafe(24),
            user_id=user_id,
            stateful=stateful,
            expires_at=now + self._ttl,
        )
        self._by_token[negotiation.token] = negotiation
        self._by_id[negotiation.connection_id] = negotiation.token
        mine[negotiation.token] = None
        return negotiation

    def claim(self, id_param: str | None, user_id: UUID, *, now: float) -> Negotiation | None:
        """Take the negotiation named by ``id`` (its token, or its connection id as some
        clients send); None when absent, unknown, expired or negotiated by another user."""
        if not id_param:
            return None
        token = id_param if id_param in self._by_token else self._by_id.get(id_param)
        if token is None:
            return None
        negotiation = self._by_token[token]
        if negotiation.user_id != user_id or negotiation.expires_at < now:
            return None
        self._forget(negotiation)
        return negotiation

    def sweep(self, now: float) -> None:
        """Drop the expired negotiations (the oldest first, stopping at the first alive)."""
        while self._by_token:
            negotiation = next(iter(self._by_token.values()))
            if negotiation.expires_at >= now:
                return
            self._forget(negotiation)

    def _forget(self, negotiation: Negotiation) -> None:
        del self._by_token[negotiation.token]
        del self._by_id[negotiation.connection_id]
        mine = self._by_user[negotiation.user_id]
        del mine[negotiation.token]
        if not mine:
            del self._by_user[negotiation.user_id]


def negotiate_body(negotiation: Negotiation, *, version: int) -> JsonObject:
    body: JsonObject = {
        "connectionId": negotiation.connection_id,
        "availableTransports": AVAILABLE_TRANSPORTS,
    }
    if version >= 1:
        body = {"negotiateVersion": 1, **body, "connectionToken": negotiation.token}
    if negotiation.stateful:
        body["useStatefulReconnect"] = True
    return body
