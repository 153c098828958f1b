"""The limits of the hub's HTTP protocol (:mod:`.http_protocol`) and what it answers past them.

:class:`HttpLimits` is what the server is given; :class:`ClientConnections` counts the open
connections per client address; the refusals are whole responses, built once. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from realtime_dispatch.hub.serving.forwarded import IPNetwork

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
