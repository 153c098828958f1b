"""The limits of the guarded HTTP protocol (:mod:`.http_protocol`) and what it answers past them.

:class:`HttpLimits` is what the server is given; :class:`ClientConnections` counts the open
connections per client address; the refusals are whole responses, built once. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from realtime_dispatch.edge.forwarded import IPNetwork, TrustedProxies

LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024
"""Discarded past the half-close of a lingering close before the connection is closed."""
REFUSAL_LINGER_BYTES = 64 * 1024
"""After a refused head (431, or 503 behind a proxy): enough for what a client has in flight
to let it read the answer, not a budget a flood can spend the server's reads on."""
MAX_HEADER_FIELDS = 100
MAX_PIPELINED = 8
"""Requests of one connection parsed and not yet answered (:mod:`.pipelining`). Answers go out
in order, one at a time, so a request parsed further ahead only waits: eight keep a pipelining
client's answers going back to back (the next is parsed while one is answered) and bound what a
connection holds to eight request heads (at most 8 × ``max_header_bytes``) and one unparsed read."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 10.0
    body_timeout: float = 15.0
    max_per_client: int = 1000
    max_header_bytes: int = 16 * 1024
    """The request line and headers of one request, in bytes."""
    max_header_fields: int = MAX_HEADER_FIELDS
    max_pipelined: int = MAX_PIPELINED
    """Requests of one connection parsed ahead of their answers; past it reading is paused."""
    trusted_proxies: tuple[IPNetwork, ...] = ()
    """Peers whose ``Forwarded`` / ``X-Forwarded-For`` give the client address."""


class HeadTooLarge(Exception):
    """Raised in a parser callback past the field cap (httptools then stops parsing)."""


class HeadCap:
    """The bytes of a connection's current request head fed to its parser, against
    ``max_header_bytes``: ``fed`` is -1 past the head (its body), 0 at the next head."""

    __slots__ = ("fed", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fed = 0

    def room(self, size: int) -> int:
        """How much of a read of ``size`` bytes may be fed: all of it in a body or while the
        head stays within the cap, else up to the cap (then :attr:`full` until the head ends)."""
        fed = self.fed
        if fed < 0 or fed + size <= self.limit:
            if fed >= 0:
                self.fed = fed + size
            return size
        self.fed = self.limit
        return self.limit - fed

    @property
    def full(self) -> bool:
        return self.fed == self.limit


class ClientConnections:
    """Open connections per client address, in this process."""

    __slots__ = ("_cap", "_open")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._open: dict[str, int] = {}

    def acquire(self, address: str) -> bool:
        count = self._open.get(address, 0)
        if self._cap and count >= self._cap:
            return False
        self._open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)

    def open_from(self, address: str) -> int:
        return self._open.get(address, 0)


class ClientPlace:
    """The place one connection holds under its client's address in :class:`ClientConnections`:
    the peer's, taken when the connection opens; from a peer in ``proxies``, each request's
    forwarded address instead, taken when its headers are in (:meth:`forwarded`)."""

    __slots__ = ("address", "counter", "peer", "proxied", "proxies")

    def __init__(self, counter: ClientConnections, proxies: TrustedProxies, peer: str | None):
        self.counter = counter
        self.proxies = proxies
        self.peer = peer
        self.proxied = peer is not None and bool(proxies) and proxies.trusts(peer)
        """The peer is a trusted proxy: places are held per request, by forwarded address."""
        self.address: str | None = None
        """The client address whose place is held."""

    def open(self) -> bool:
        """The connection opens: a place for its peer (unless proxied). False: over the cap."""
        if self.proxied or self.peer is None:
            return True
        if not self.counter.acquire(self.peer):
            return False
        self.address = self.peer
        return True

    def forwarded(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, bool]:
        """A request through the proxy: its client's address, and whether it got a place (the
        place of a request before it on the connection is freed first)."""
        address = self.proxies.client(self.peer or "", headers)
        self.release()
        if not self.counter.acquire(address):
            return address, False
        self.address = address
        return address, True

    def release(self) -> None:
        if self.address is not None:
            self.counter.release(self.address)
            self.address = None

    def hand_over(self) -> str | None:
        """The address whose place an upgraded connection now holds (None: no place)."""
        address, self.address = self.address, None
        return address

    def client(self) -> str | None:
        """The address refusals are counted under: the place's, else the peer's."""
        return self.address if self.address is not None else self.peer


def _plain_answer(status: bytes, text: bytes) -> bytes:
    """A whole ``text/plain`` response that ends the connection."""
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (status, len(text), text)
    )


REQUEST_TIMEOUT_RESPONSE = _plain_answer(b"408 Request Timeout", b"Request Timeout.")
TOO_MANY_RESPONSE = _plain_answer(
    b"503 Service Unavailable", b"Too many connections from this address."
)
HEAD_TOO_LARGE_RESPONSE = _plain_answer(
    b"431 Request Header Fields Too Large", b"Request header fields too large."
)


def expects_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def content_length(headers: list[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name == b"content-length":
            return int(value)  # the parser has checked it
    return 0
