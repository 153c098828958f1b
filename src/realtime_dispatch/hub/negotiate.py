"""``POST /hubs/messenger/negotiate``: hands out a connection id and token, and remembers them
(with the user and whether stateful reconnect was asked for) until the transport arrives: a
WebSocket, a Server-Sent Events stream or a first long poll (all three are listed)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from uuid import UUID

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
    """Negotiations not yet used by a WebSocket; each lives ``ttl`` seconds."""

    __slots__ = ("_by_id", "_by_token", "_ttl")

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._by_token: dict[str, Negotiation] = {}
        self._by_id: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_token)

    def create(self, user_id: UUID, *, stateful: bool, now: float) -> Negotiation:
        negotiation = Negotiation(
            connection_id=new_connection_id(),
            token=secrets.token_urlsafe(24),
            user_id=user_id,
            stateful=stateful,
            expires_at=now + self._ttl,
        )
        self._by_token[negotiation.token] = negotiation
        self._by_id[negotiation.connection_id] = negotiation.token
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
        del self._by_token[token]
        del self._by_id[negotiation.connection_id]
        return negotiation

    def sweep(self, now: float) -> None:
        for token, negotiation in list(self._by_token.items()):
            if negotiation.expires_at < now:
                del self._by_token[token]
                del self._by_id[negotiation.connection_id]


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
