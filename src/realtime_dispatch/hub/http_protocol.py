"""Slow and greedy clients at the connection: :func:`guarded_http_protocol`, uvicorn's httptools
protocol with what it lacks.

* **Header timeout.** uvicorn waits for request headers forever: a client that connects, or
  sends half a request line, holds a file descriptor until it goes away. Here the request line
  and headers must be complete within ``header_timeout`` of the connection opening, or of the
  previous response ending (keep-alive); otherwise 408 and the connection is closed.
* **Body timeout.** A request's body must be complete within ``body_timeout`` of its headers;
  otherwise the connection is closed (the app sees a disconnect).
* **Lingering close.** A response sent before its request's body was read (401, 413) ends the
  connection, but not with a bare close: that would reset it while the client is still
  writing, and the client would see the reset instead of the answer. The connection is
  half-closed after the response (FIN), and what the client still sends is discarded unparsed
  for up to ``LINGER_SECONDS`` / ``LINGER_BYTES``, then it is closed.
* **WebSocket upgrades served directly.** An upgrade of a path in ``direct`` goes to the
  protocol its factory builds (the hub's :class:`~.ws_direct.DirectWebSocket`) instead of
  uvicorn's WebSocket protocol and the ASGI app.
* **Connections per client address.** A connection past ``max_per_client`` open ones from the
  same address gets 503 and is closed before anything is read; a connection upgraded to a
  WebSocket keeps its place until the WebSocket closes. 0 turns the cap off.

One timer per connection, armed and cancelled in the parser's callbacks: no task, no polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

log = structlog.get_logger(__name__)

LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 16\r\nconnection: close\r\n\r\nRequest Timeout."
)
TOO_MANY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 38\r\nconnection: close\r\n\r\nToo many connections from this address."
)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 10.0
    body_timeout: float = 15.0
    max_per_client: int = 1000


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


def _expects_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


DirectUpgrade = Callable[[ServerState], asyncio.Protocol]
"""Builds the protocol a WebSocket upgrade is handed to (given the server's state)."""


def guarded_http_protocol(
    limits: HttpLimits,
    clients: ClientConnections | None = None,
    direct: Mapping[str, DirectUpgrade] | None = None,
) -> type[HttpToolsProtocol]:
    """A subclass of uvicorn's httptools protocol bound to ``limits``, one shared
    :class:`ClientConnections` and the ``direct`` WebSocket paths (give it to
    ``uvicorn.Config(http=...)``)."""
    counter = clients if clients is not None else ClientConnections(limits.max_per_client)
    direct_paths = dict(direct or {})

    class GuardedHttpProtocol(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _address: str | None = None
        _body_pending = False
        _lingering = -1
        """Bytes discarded since the half-close; -1 while not lingering."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            if address is not None:
                if not counter.acquire(address):
                    log.warning("http_client_connection_cap", cap=limits.max_per_client)
                    transport.write(TOO_MANY_RESPONSE)
                    transport.close()
                    return
                self._address = address
            self._arm(limits.header_timeout, self._headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._release()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._lingering < 0:
                super().data_received(data)
                return
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self.transport.close()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()
            if self.transport.get_protocol() is self and _expects_body(self.headers):
                self._body_pending = True
                self._arm(limits.body_timeout, self._body_late)

        def on_message_complete(self) -> None:
            self._disarm()
            self._body_pending = False
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if self._body_pending:  # answered before the body was read: linger, then close
                self._unset_keepalive_if_required()
                self._lingering = 0
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self._arm(LINGER_SECONDS, self.transport.close)
                return
            if self.cycle is None or self.cycle.response_complete:  # no pipelined request
                self._arm(limits.header_timeout, self._headers_late)  # the next request's

        def handle_websocket_upgrade(self) -> None:
            self._disarm()
            factory = direct_paths.get(self.url.partition(b"?")[0].decode("latin-1"))
            if factory is None:
                super().handle_websocket_upgrade()
            else:
                self._upgrade_direct(factory)
            protocol: Any = self.transport.get_protocol()
            address, self._address = self._address, None
            if address is None:
                return
            if hasattr(protocol, "on_connection_lost"):  # the hub's: keeps the place till closed
                protocol.on_connection_lost = lambda: counter.release(address)
            else:  # a WebSocket protocol that cannot tell when it closes: not counted
                counter.release(address)

        def _upgrade_direct(self, factory: DirectUpgrade) -> None:
            """uvicorn's own upgrade (the request handed over as bytes), to the protocol
            ``factory`` builds instead of uvicorn's WebSocket protocol."""

            def build(*, server_state: ServerState, **_: Any) -> asyncio.Protocol:
                return factory(server_state)

            self.ws_protocol_class = build  # type: ignore[assignment]  # uvicorn only calls it
            super().handle_websocket_upgrade()

        def _arm(self, delay: float, callback: Callable[[], None]) -> None:
            self._disarm()
            self._timer = self.loop.call_later(delay, callback)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _release(self) -> None:
            if self._address is not None:
                counter.release(self._address)
                self._address = None

        def _headers_late(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                log.info("http_header_timeout", timeout=limits.header_timeout)
                self.transport.write(REQUEST_TIMEOUT_RESPONSE)
                self.transport.close()

        def _body_late(self) -> None:
            self._timer = None
            if not self.transport.is_closing() and self._lingering < 0:
                log.info("http_body_timeout", timeout=limits.body_timeout)
                self.transport.close()

    return GuardedHttpProtocol
