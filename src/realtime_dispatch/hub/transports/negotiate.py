"""``POST /hubs/messenger/negotiate``: hands out a connection id and token, and remembers them
(with the user and whether stateful reconnect was asked for) until the transport arrives: a
WebSocket, a Server-Sent Events stream or a first long poll (all three are listed).

The store is bounded, and no one can fill it for others: a user's negotiations past
``per_user`` push out that user's oldest, an address's past ``per_address`` push out that
address's oldest (a client that negotiates and never connects only pushes out its own), and
past ``total`` the oldest of all is pushed out. Negotiate itself never fails for lack of room;
the worst a flood from many addresses can do is shorten how long an unused negotiation waits
(a client connects within milliseconds of its negotiate)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from realtime_dispatch.hub.wire.protocols import Transport
from realtime_dispatch.values.json_types import JsonObject, JsonValue
from realtime_dispatch.values.keys import Key

AVAILABLE_TRANSPORTS: list[JsonValue] = [
    {"transport": t.value, "transferFormats": list[JsonValue](t.transfer_formats)}
    for t in Transport
]


@dataclass(frozen=True, slots=True)
class Negotiation:
    connection_id: str
    token: str
    user_id: Key
    stateful: bool
    expires_at: float
    address: str | None = None
    """The client address it was made from (None: not bounded per address)."""


def new_connection_id() -> str:
    return secrets.token_urlsafe(16)


def worker_prefix(worker: int | None) -> str:
    """What leads the tokens and connection ids a worker of ``--workers N`` hands out
    (``w3.``), so that its parent routes a connection carrying one (``?id=``) to it; empty for a
    hub that is no worker. The rest of an id is URL-safe base64, which has no dot."""
    return "" if worker is None else f"w{worker}."


def worker_of(id_param: str) -> int | None:
    """The worker named by a token's or connection id's :func:`worker_prefix`, if any."""
    head, dot, _ = id_param.partition(".")
    if not dot or len(head) < 2 or head[0] != "w" or not head[1:].isdigit():
        return None
    return int(head[1:])


class NegotiationStore:
    """Negotiations not yet used by a WebSocket; each lives ``ttl`` seconds. Dicts keep
    insertion order, which is expiry order (one ``ttl`` for all, a monotonic clock)."""

    __slots__ = (
        "_by_address",
        "_by_id",
        "_by_token",
        "_by_user",
        "_per_address",
        "_per_user",
        "_prefix",
        "_total",
        "_ttl",
        "on_evicted",
    )

    def __init__(
        self,
        ttl: float,
        *,
        per_user: int = 50,
        per_address: int = 1000,
        total: int = 10_000,
        prefix: str = "",
    ) -> None:
        self._ttl = ttl
        self._prefix = prefix
        """Leads every token and connection id: a worker's :func:`worker_prefix`."""
        self._per_user = per_user
        self._per_address = per_address
        """0: no bound per address."""
        self._total = total
        self._by_token: dict[str, Negotiation] = {}
        self._by_id: dict[str, str] = {}
        self._by_user: dict[Key, dict[str, None]] = {}
        """Each user's tokens, oldest first."""
        self._by_address: dict[str, dict[str, None]] = {}
        """Each address's tokens, oldest first."""
        self.on_evicted: Callable[[], None] | None = None
        """Told of each negotiation pushed out by the total bound (by someone else's)."""

    def __len__(self) -> int:
        return len(self._by_token)

    def pending_for(self, user_id: Key) -> int:
        return len(self._by_user.get(user_id, ()))

    def create(
        self, user_id: Key, *, stateful: bool, now: float, address: str | None = None
    ) -> Negotiation:
        """A new negotiation, making room by the bounds (never refused)."""
        self.sweep(now)
        self._make_room(self._by_user.get(user_id), self._per_user)
        if address is not None and self._per_address:
            self._make_room(self._by_address.get(address), self._per_address)
        while len(self._by_token) >= self._total:
            self._forget(next(iter(self._by_token.values())))
            if self.on_evicted is not None:
                self.on_evicted()
        negotiation = Negotiation(
            connection_id=self._prefix + new_connection_id(),
            token=self._prefix + secrets.token_urlsafe(24),
            user_id=user_id,
            stateful=stateful,
            expires_at=now + self._ttl,
            address=address if self._per_address else None,
        )
        self._by_token[negotiation.token] = negotiation
        self._by_id[negotiation.connection_id] = negotiation.token
        self._by_user.setdefault(user_id, {})[negotiation.token] = None
        if negotiation.address is not None:
            self._by_address.setdefault(negotiation.address, {})[negotiation.token] = None
        return negotiation

    def _make_room(self, tokens: dict[str, None] | None, bound: int) -> None:
        """Push out the oldest of ``tokens`` (one user's or one address's) down to ``bound - 1``."""
        while tokens and len(tokens) >= bound:
            self._forget(self._by_token[next(iter(tokens))])

    def claim(self, id_param: str | None, user_id: Key, *, now: float) -> Negotiation | None:
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
        _discard(self._by_user, negotiation.user_id, negotiation.token)
        if negotiation.address is not None:
            _discard(self._by_address, negotiation.address, negotiation.token)


def _discard(index: dict[Any, dict[str, None]], key: object, token: str) -> None:
    tokens = index[key]
    del tokens[token]
    if not tokens:
        del index[key]


def negotiate_body(negotiation: Negotiation, *, version: int) -> JsonObject:
    """The answer as ASP.NET Core's ``NegotiateProtocol`` writes it: ``negotiateVersion``
    always (``0`` for a version-0 request: clients such as signalrcore require the field), the
    ``connectionToken`` from version 1 on (the highest this hub speaks)."""
    body: JsonObject = {
        "negotiateVersion": 1 if version >= 1 else 0,
        "connectionId": negotiation.connection_id,
        "availableTransports": AVAILABLE_TRANSPORTS,
    }
    if version >= 1:
        body["connectionToken"] = negotiation.token
    if negotiation.stateful:
        body["useStatefulReconnect"] = True
    return body
