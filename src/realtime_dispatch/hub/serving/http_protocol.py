"""Slow and greedy clients at the connection: :func:`guarded_http_protocol`, uvicorn's httptools
protocol with what it lacks.

* **Header timeout.** uvicorn waits for request headers forever: a client that connects, or
  sends half a request line, holds a file descriptor until it goes away. Here the request line
  and headers must be complete within ``header_timeout`` of the connection opening, or of the
  previous response ending (keep-alive); otherwise 408 and the connection is closed.
* **Body timeout.** A request's body must be complete within ``body_timeout`` of its headers;
  otherwise the connection is closed (the app sees a disconnect).
* **A busy server is not a slow client.** When a timer fires while the client's bytes wait
  unread in this server's own socket buffer (uvloop runs due timers before it reads, so a loop
  that fell behind would cut the very requests it has not read yet), or while reading is paused
  by the server's own flow control, the connection gets ``BACKLOG_GRACE`` more, up to the
  timeout once over: a slow sender is still cut, an honest client of a busy server is not.
* **Lingering close.** A response sent before its request's body was read (401, 413) ends the
  connection, but not with a bare close: that would reset it while the client is still
  writing, and the client would see the reset instead of the answer. The connection is
  half-closed after the response (FIN), and what the client still sends is discarded unparsed
  for up to ``LINGER_SECONDS`` / ``LINGER_BYTES``, then it is closed.
* **WebSocket upgrades served directly.** An upgrade of a path in ``direct`` goes to the
  protocol its factory builds (the hub's :class:`~.ws_direct.DirectWebSocket`) instead of
  uvicorn's WebSocket protocol and the ASGI app.
* **POST endpoints served directly.** A ``POST`` to a path in ``posts`` (the hub's batch
  endpoint, :class:`~.push_api.DirectBatch`) is answered by the protocol itself, in the
  parser's callbacks, without a request cycle, a task or the ASGI app; only the endpoint's
  own wait (the publish) runs in a task. It falls back to the app when another request is
  still being answered on the connection (pipelining), and for ``Expect: 100-continue``.
* **Bounded request heads.** The request line and headers together may take
  ``max_header_bytes`` (and at most ``max_header_fields`` fields); past either the request is
  answered 431 and the connection ends (lingering close), and nothing more of it reaches the
  parser. httptools grows the URL and each header by concatenation, so the cap also keeps
  parsing linear in what is accepted. Bytes are counted per read: a request pipelined behind
  another in the same read is counted from the next read on, so a head is bounded by the cap
  plus one read.
* **Connections per client address.** A connection past ``max_per_client`` open ones from the
  same address gets 503 and is closed before anything is read; a connection upgraded to a
  WebSocket keeps its place until the WebSocket closes. 0 turns the cap off. From a peer in
  ``trusted_proxies`` the address is the client's (:mod:`.forwarded`), known once a
  request's headers are in: each request holds a place under it until its response ends (a
  WebSocket until it closes), and the ASGI scope's ``client`` is that address.
* **Refusals counted and logged** by :class:`~.http_refusals.HttpRefusals` (a metric with a
  reason, at most a log line per reason and address per interval).

One timer per connection, armed and cancelled in the parser's callbacks: no task, no polling.
"""

from __future__ import annotations

import asyncio
import fcntl
import sys
import termios
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httptools
import structlog
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState

from realtime_dispatch.hub.http_refusals import HttpRefusals, RefusalReason
from realtime_dispatch.hub.serving.forwarded import IPNetwork, TrustedProxies

log = structlog.get_logger(__name__)

BACKLOG_GRACE = 1.0
"""Seconds more for a connection whose bytes wait in this server's own backlog at its timer."""
LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024
REFUSAL_LINGER_BYTES = 64 * 1024
"""After a refused head (431, or 503 behind a proxy): enough for what a client has in flight
to let it read the answer, not a budget a flood can spend the server's reads on."""


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
MAX_HEADER_FIELDS = 100


@dataclass(frozen=True, slots=True)
class HttpLimits:
    header_timeout: float = 10.0
    body_timeout: float = 15.0
    max_per_client: int = 1000
    max_header_bytes: int = 16 * 1024
    """The request line and headers of one request, in bytes."""
    max_header_fields: int = MAX_HEADER_FIELDS
    trusted_proxies: tuple[IPNetwork, ...] = ()
    """Peers whose ``Forwarded`` / ``X-Forwarded-For`` give the client address."""


class HeadTooLarge(Exception):
    """Raised in a parser callback past the field cap (httptools then stops parsing)."""


def unread_bytes(transport: asyncio.BaseTransport) -> int:
    """Bytes the kernel holds for this connection that the server has not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):  # closed meanwhile
        return 0
    return int.from_bytes(answer, sys.byteorder)


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


def _content_length(headers: list[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name == b"content-length":
            return int(value)  # the parser has checked it
    return 0


DirectUpgrade = Callable[[ServerState], asyncio.Protocol]
"""Builds the protocol a WebSocket upgrade is handed to (given the server's state)."""

Answer = tuple[int, bytes]
"""A status and its JSON body."""


class DirectPost(Protocol):
    """A ``POST`` endpoint the protocol answers itself, without the ASGI app."""

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def too_large(self) -> Answer:
        """The answer to a body over ``max_body_bytes``."""

    @property
    def failure(self) -> Answer:
        """The answer when the endpoint raised."""

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> Answer | None:
        """The answer given once the headers are complete, the body unread; None to read it."""

    def answer(self, body: bytes) -> Answer | Coroutine[Any, Any, Answer]:
        """The answer to the whole body, or the coroutine that gives it."""


class _DirectRequest:
    """A request to a :class:`DirectPost` on its way: its body so far, whether it is all read
    and whether it has been answered (a refusal may come before the body is read)."""

    __slots__ = ("answered", "endpoint", "keep_alive", "parts", "read", "size")

    def __init__(self, endpoint: DirectPost, *, keep_alive: bool) -> None:
        self.endpoint = endpoint
        self.keep_alive = keep_alive
        self.parts: list[bytes] = []
        self.size = 0
        self.read = False
        self.answered = False


def guarded_http_protocol(
    limits: HttpLimits,
    clients: ClientConnections | None = None,
    direct: Mapping[str, DirectUpgrade] | None = None,
    posts: Mapping[str, DirectPost] | None = None,
    refusals: HttpRefusals | None = None,
) -> type[HttpToolsProtocol]:
    """A subclass of uvicorn's httptools protocol bound to ``limits``, one shared
    :class:`ClientConnections`, the ``direct`` WebSocket paths, the ``posts`` it answers
    itself and where its refusals are counted (give it to ``uvicorn.Config(http=...)``)."""
    counter = clients if clients is not None else ClientConnections(limits.max_per_client)
    direct_paths = dict(direct or {})
    direct_posts = {path.encode("latin-1"): endpoint for path, endpoint in (posts or {}).items()}
    refused = (refusals if refusals is not None else HttpRefusals()).refused
    proxies = TrustedProxies(limits.trusted_proxies)
    max_head = limits.max_header_bytes
    max_fields = limits.max_header_fields

    class GuardedHttpProtocol(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _address: str | None = None
        """The client address whose place this connection (or its request) holds."""
        _proxied = False
        """The peer is a trusted proxy: places are held per request, by forwarded address."""
        _body_pending = False
        _lingering = -1
        _linger_bytes = LINGER_BYTES
        """Discarded past the half-close before the connection is closed."""
        """Bytes discarded since the half-close; -1 while not lingering."""
        _deferred = 0.0
        """Seconds of grace given to the current timer for bytes in the server's backlog."""
        _head = 0
        """Bytes of the current request head fed to the parser; -1 past the head (body)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            if address is not None and proxies and proxies.trusts(address):
                self._proxied = True
            elif address is not None:
                if not counter.acquire(address):
                    refused(RefusalReason.CLIENT_CAP, address)
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
            if self._lingering >= 0:
                self._lingering += len(data)
                if self._lingering > self._linger_bytes:
                    self.transport.close()
                return
            head = self._head
            if head < 0 or head + len(data) <= max_head:  # a body, or a head within its cap
                if head >= 0:
                    self._head = head + len(data)
                self._feed(data)
                return
            room = max_head - head  # the cap is reached in this read
            self._head = max_head
            self._feed(data[:room])
            if self._head == max_head:  # still in that head: refused, the rest never parsed
                if self._lingering < 0 and self.transport.get_protocol() is self:
                    self._head_too_large()
            elif room < len(data):  # the head ended within the cap: go on with the rest
                self.data_received(data[room:])

        def _feed(self, data: bytes) -> None:
            """uvicorn's ``data_received``, with the refusal of a head over the field cap."""
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._lingering < 0 and not self.transport.is_closing():
                    if self._should_upgrade():
                        self.handle_websocket_upgrade()
                    else:
                        self._unsupported_upgrade_warning()
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, HeadTooLarge):
                    self._head_too_large()
                elif self._lingering < 0 and not self.transport.is_closing():
                    msg = "Invalid HTTP request received."
                    self.logger.warning(msg)
                    self.send_400_response(msg)

        def on_header(self, name: bytes, value: bytes) -> None:
            headers = self.headers
            if len(headers) >= max_fields:
                raise HeadTooLarge
            name = name.lower()  # as uvicorn's
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            headers.append((name, value))

        def _head_too_large(self) -> None:
            self._disarm()
            refused(RefusalReason.HEADERS_TOO_LARGE, self._client_address())
            self._refuse(HEAD_TOO_LARGE_RESPONSE)

        def _refuse(self, response: bytes) -> None:
            """Answer ``response`` and end the connection, reading nothing more of it."""
            self._unset_keepalive_if_required()
            self.transport.write(response)
            self._lingering = 0
            self._linger_bytes = REFUSAL_LINGER_BYTES  # a flood is not read for long
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._arm(LINGER_SECONDS, self.transport.close)

        def _client_address(self) -> str | None:
            if self._address is not None:
                return self._address
            return self.client[0] if self.client else None

        _direct: _DirectRequest | None = None
        """The request to a direct POST being read or answered."""

        def on_headers_complete(self) -> None:
            self._disarm()
            self._head = -1
            if self._lingering >= 0:  # ending: what is left of this read is dropped
                return
            if self._proxied and not self._hold_forwarded():
                return
            endpoint = self._direct_post()
            if endpoint is None:
                super().on_headers_complete()
            if self.transport.get_protocol() is self and _expects_body(self.headers):
                self._body_pending = True
                self._arm(limits.body_timeout, self._body_late)
            if endpoint is not None:
                self._begin_direct(endpoint)

        def on_body(self, body: bytes) -> None:
            if self._lingering >= 0:
                return
            request = self._direct
            if request is None or request.read:
                super().on_body(body)
            elif not request.answered:
                self._direct_body(request, body)

        def on_message_complete(self) -> None:
            self._head = 0  # what follows is the next request's head
            if self._lingering >= 0:
                return
            request = self._direct
            if request is not None and not request.read:
                self._direct_complete(request)
                return
            self._disarm()
            self._body_pending = False
            super().on_message_complete()

        def on_response_complete(self) -> None:
            self._response_complete(body_unread=self._body_pending)

        def _response_complete(self, *, body_unread: bool) -> None:
            if self._proxied:
                self._release()  # the request's place under its client's address
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if body_unread:  # answered before the body was read: linger, then close
                self._unset_keepalive_if_required()
                self._lingering = 0
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self._arm(LINGER_SECONDS, self.transport.close)
                return
            if self.cycle is None or self.cycle.response_complete:  # no pipelined request
                self._arm(limits.header_timeout, self._headers_late)  # the next request's

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            if self._direct is not None and not self._direct.answered:  # due first: queue
                self.flow.pause_reading()
                self.pipeline.appendleft((cycle, app))
                return
            super()._start_asgi_task(cycle, app)

        def shutdown(self) -> None:
            if self._direct is not None and not self._direct.answered:
                self._direct.keep_alive = False  # answer it, then close
                return
            super().shutdown()

        def _direct_post(self) -> DirectPost | None:
            """The endpoint to answer this request directly, or None to hand it to uvicorn."""
            if not direct_posts or self.expect_100_continue or self.limit_concurrency is not None:
                return None
            if self._direct is not None or (
                self.cycle is not None and not self.cycle.response_complete
            ):
                return None  # another request is being answered: uvicorn queues this one
            if self.parser.get_method() != b"POST" or self.parser.should_upgrade():
                return None
            return direct_posts.get(self.url.partition(b"?")[0])

        def _begin_direct(self, endpoint: DirectPost) -> None:
            keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
            request = self._direct = _DirectRequest(endpoint, keep_alive=keep_alive)
            try:
                refusal = endpoint.refusal(self.headers)
                if refusal is None and _content_length(self.headers) > endpoint.max_body_bytes:
                    refusal = endpoint.too_large
            except Exception:
                log.exception("http_direct_failed")
                refusal = endpoint.failure
            if refusal is not None:
                self._answer_direct(request, refusal)

        def _direct_body(self, request: _DirectRequest, body: bytes) -> None:
            request.size += len(body)
            if request.size > request.endpoint.max_body_bytes:
                self._answer_direct(request, request.endpoint.too_large)
            else:
                request.parts.append(body)

        def _direct_complete(self, request: _DirectRequest) -> None:
            request.read = True
            if request.answered:  # refused before its (empty) body: done with it
                self._direct = None
                return
            self._disarm()
            self._body_pending = False
            endpoint = request.endpoint
            try:
                answer = endpoint.answer(b"".join(request.parts))
            except Exception:
                log.exception("http_direct_failed")
                answer = endpoint.failure
            if isinstance(answer, tuple):
                self._answer_direct(request, answer)
                return
            task = self.loop.create_task(self._answer_published(request, answer))
            self.tasks.add(task)  # uvicorn's shutdown waits for it
            task.add_done_callback(self.tasks.discard)

        async def _answer_published(
            self, request: _DirectRequest, pending: Coroutine[Any, Any, Answer]
        ) -> None:
            try:
                answer = await pending
            except Exception:
                log.exception("http_direct_failed")
                answer = request.endpoint.failure
            if self.transport.is_closing():  # the client is gone: nobody to answer
                self._direct = None
                return
            self._answer_direct(request, answer)

        def _answer_direct(self, request: _DirectRequest, answer: Answer) -> None:
            request.answered = True
            if request.read:
                self._direct = None
            body_unread = not request.read and self._body_pending
            ending = not request.keep_alive or body_unread
            self._write_answer(answer, close=ending)
            if not request.keep_alive and not body_unread:
                self.transport.close()
            self._response_complete(body_unread=body_unread)

        def _write_answer(self, answer: Answer, *, close: bool) -> None:
            status, body = answer
            parts = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                parts += (name, b": ", value, b"\r\n")
            parts.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
            if close:
                parts.append(b"connection: close\r\n")
            parts += (b"\r\n", body)
            self.transport.write(b"".join(parts))
            if self.access_log:
                client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
                url, version = self.url.decode("latin-1"), self.parser.get_http_version()
                self.access_logger.info('%s - "POST %s HTTP/%s" %d', client, url, version, status)

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
            self._deferred = 0.0
            self._timer = self.loop.call_later(delay, callback)

        def _server_behind(self, timeout: float, callback: Callable[[], None]) -> bool:
            """True (and the timer re-armed for ``BACKLOG_GRACE``) when what is late is
            waiting on this server, not on the client; at most ``timeout`` more in all."""
            if self._deferred >= timeout:
                return False
            if not (self.flow.read_paused or unread_bytes(self.transport)):
                return False
            self._deferred += BACKLOG_GRACE
            self._timer = self.loop.call_later(BACKLOG_GRACE, callback)
            log.debug("http_timeout_deferred", deferred_s=self._deferred)
            return True

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _release(self) -> None:
            if self._address is not None:
                counter.release(self._address)
                self._address = None

        def _hold_forwarded(self) -> bool:
            """A request through a trusted proxy: its client's address, from the forwarding
            headers, goes in the scope and holds a place (False: refused, 503)."""
            peer = self.client[0] if self.client else ""
            address = proxies.client(peer, self.headers)
            self._release()  # a request pipelined behind another: one place per connection
            self.scope["client"] = (address, 0)
            if not counter.acquire(address):
                refused(RefusalReason.CLIENT_CAP, address)
                self._refuse(TOO_MANY_RESPONSE)
                return False
            self._address = address
            return True

        def _headers_late(self) -> None:
            self._timer = None
            if self._server_behind(limits.header_timeout, self._headers_late):
                return
            if not self.transport.is_closing():
                refused(RefusalReason.HEADER_TIMEOUT, self._client_address())
                self.transport.write(REQUEST_TIMEOUT_RESPONSE)
                self.transport.close()

        def _body_late(self) -> None:
            self._timer = None
            if self._lingering < 0 and self._server_behind(limits.body_timeout, self._body_late):
                return
            if not self.transport.is_closing() and self._lingering < 0:
                refused(RefusalReason.BODY_TIMEOUT, self._client_address())
                self.transport.close()

    return GuardedHttpProtocol
