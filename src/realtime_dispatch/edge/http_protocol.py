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
  writing, and the client would see the reset instead of the answer. The response says
  ``connection: close`` (a keep-alive client would otherwise send its next request on a
  connection that is ending, and lose it), the connection is half-closed after it (FIN), and
  what the client still sends is discarded unparsed for up to ``LINGER_SECONDS`` /
  ``LINGER_BYTES``, then it is closed.
* **An upgrade its client gave up on is dropped.** When a replica behind a storm reads an
  upgrade whose client has closed its side meanwhile (it timed out while the request waited in
  this server's accept queue or socket buffer), the connection is closed at once, before the
  token is verified or an opening started (:func:`~.http_timer.peer_closed`): otherwise a replica
  whose queue is deeper than its clients' patience spends all its work on the ones that left.
* **WebSocket upgrades served directly.** An upgrade of a path in ``direct`` goes to the
  protocol its factory builds (the hub's
  :class:`~realtime_dispatch.hub.transports.ws_direct.DirectWebSocket`) instead of uvicorn's
  WebSocket protocol and the ASGI app.
* **POST endpoints served directly.** A ``POST`` to a path in ``posts`` (the hub's batch
  endpoint, :class:`~realtime_dispatch.hub.serving.push_api.DirectBatch`) is answered by the
  protocol itself
  (:mod:`.direct_post`), in the parser's callbacks, without a request cycle, a task or the
  ASGI app; only the endpoint's own wait (the publish) runs in a task. It falls back to the
  app when another request is still being answered on the connection (pipelining), and for
  ``Expect: 100-continue``.
* **Bounded request heads.** The request line and headers together may take
  ``max_header_bytes`` (and at most ``max_header_fields`` fields); past either the request is
  answered 431 and the connection ends (lingering close), and nothing more of it reaches the
  parser. httptools grows the URL and each header by concatenation, so the cap also keeps
  parsing linear in what is accepted. Bytes are counted per read: a request pipelined behind
  another in the same read is counted from the next read on, so a head is bounded by the cap
  plus one read.
* **Pipelining bounded.** At most ``max_pipelined`` requests of a connection are parsed ahead
  of their answers; what it sends past them is held unparsed, reading paused, and parsed as
  answers go out (:mod:`.pipelining`). A connection holds a few request heads and one read,
  whatever it sends and whether or not it reads its answers.
* **A cut connection cuts its requests.** When the connection closes, or ends after a refusal,
  every request of it still being answered or queued is told so (uvicorn only tells the last
  one parsed, and the others would write to a closed transport), the queued ones are dropped and
  the parser let go: nothing of the connection is left for the cyclic GC to find.
* **Connections per client address.** A connection past ``max_per_client`` open ones from the
  same address gets 503 and is closed before anything is read; a connection upgraded to a
  WebSocket keeps its place until the WebSocket closes. 0 turns the cap off. From a peer in
  ``trusted_proxies`` the address is the client's (:mod:`.forwarded`), known once a
  request's headers are in: each request holds a place under it until its response ends (a
  WebSocket until it closes), and the ASGI scope's ``client`` is that address.
* **Refusals counted and logged** by :class:`~.http_refusals.HttpRefusals` (a metric with a
  reason, at most a log line per reason and address per interval).

One timer per connection, armed and cancelled in the parser's callbacks: no task, no polling
(:mod:`.http_timer`). The limits and the refusals' responses are :mod:`.http_limits`; a direct
``POST`` on its way is :mod:`.direct_post`'s. This module holds the protocol: what it reads,
counts, times and hands over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, cast

import httptools
import structlog
from uvicorn._types import ASGI3Application, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from realtime_dispatch.edge.direct_post import (
    Answer,
    DirectPost,
    DirectRequest,
    direct_endpoint,
)
from realtime_dispatch.edge.forwarded import TrustedProxies
from realtime_dispatch.edge.http_limits import (
    HEAD_TOO_LARGE_RESPONSE,
    REFUSAL_LINGER_BYTES,
    REQUEST_TIMEOUT_RESPONSE,
    TOO_MANY_RESPONSE,
    ClientConnections,
    ClientPlace,
    HeadCap,
    HeadTooLarge,
    HttpLimits,
    expects_body,
)
from realtime_dispatch.edge.http_refusals import HttpRefusals, RefusalReason
from realtime_dispatch.edge.http_timer import ConnectionTimer, LingeringClose, peer_closed
from realtime_dispatch.edge.pipelining import GatedFlow, PipelineGate

log = structlog.get_logger(__name__)

__all__ = [
    "Answer",
    "ClientConnections",
    "DirectPost",
    "DirectUpgrade",
    "HttpLimits",
    "guarded_http_protocol",
]

DirectUpgrade = Callable[[ServerState], asyncio.Protocol]
"""Builds the protocol a WebSocket upgrade is handed to (given the server's state)."""


def _upgraded_by(factory: DirectUpgrade) -> Callable[..., asyncio.Protocol]:
    """A ``ws_protocol_class`` for uvicorn's own upgrade (the request handed over as bytes)
    that builds the protocol ``factory`` builds instead of uvicorn's WebSocket protocol
    (uvicorn only calls it)."""

    def build(*, server_state: ServerState, **_: Any) -> asyncio.Protocol:
        return factory(server_state)

    return build


def _close_if_answered_early(cycle: RequestResponseCycle, protocol: Any) -> None:
    """Make ``cycle``'s response say ``connection: close`` when it starts before the body is
    read (``protocol.body_pending``), yet leave the close to ``protocol`` (the lingering one,
    after ``protocol.ending`` is set): uvicorn would close the transport bare as soon as the
    response ends."""
    send = cycle.send

    async def send_closing(message: ASGISendEvent) -> None:
        if message["type"] != "http.response.start" or not protocol.body_pending:
            await send(message)
            return
        headers = [
            *(h for h in message.get("headers", ()) if h[0].lower() != b"connection"),
            (b"connection", b"close"),
        ]
        await send(cast("ASGISendEvent", {**message, "headers": headers}))
        cycle.keep_alive = True  # uvicorn's bare close after the body: not wanted
        protocol.ending = True

    cycle.send = send_closing  # type: ignore[method-assign]


def guarded_http_protocol(
    limits: HttpLimits,
    clients: ClientConnections | None = None,
    direct: Mapping[str, DirectUpgrade] | None = None,
    posts: Mapping[str, DirectPost] | None = None,
    refusals: HttpRefusals | None = None,
    *,
    ended: Callable[[], None] | None = None,
) -> type[HttpToolsProtocol]:
    """A subclass of uvicorn's httptools protocol bound to ``limits``, one shared
    :class:`ClientConnections`, the ``direct`` WebSocket paths, the ``posts`` it answers
    itself and where its refusals are counted (give it to ``uvicorn.Config(http=...)``).
    ``ended`` is called when a connection ends (a WebSocket's when it closes, with the hub's
    WebSocket protocols): :class:`~.gc_sweep.GarbageSweep`'s."""
    counter = clients if clients is not None else ClientConnections(limits.max_per_client)
    direct_paths = dict(direct or {})
    direct_posts = {path.encode("latin-1"): endpoint for path, endpoint in (posts or {}).items()}
    refused = (refusals if refusals is not None else HttpRefusals()).refused
    proxies = TrustedProxies(limits.trusted_proxies)
    max_head = limits.max_header_bytes
    max_fields = limits.max_header_fields
    max_pipelined = limits.max_pipelined
    on_end = ended if ended is not None else _nothing

    class GuardedHttpProtocol(HttpToolsProtocol):
        timer: ConnectionTimer
        """The connection's one timer (its head, its body, its lingering close)."""
        place: ClientPlace
        """The place this connection (or its request) holds under its client's address."""
        body_pending = ending = False
        """A request's body is expected and not read yet; ``ending``: a response said
        ``connection: close`` before it was (see :func:`_close_if_answered_early`)."""
        linger: LingeringClose
        head: HeadCap
        """Bytes of the current request head fed to the parser (-1 past the head)."""
        direct: DirectRequest | None = None
        """The request to a direct POST being read or answered."""
        flow: GatedFlow
        gate: PipelineGate
        """How far requests are parsed ahead of their answers (:mod:`.pipelining`)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.flow = GatedFlow(transport)
            self.gate = PipelineGate(self.flow, self.pipeline, max_pipelined)
            self.head = HeadCap(max_head)
            self.linger = LingeringClose()
            self.timer = ConnectionTimer(self.loop, transport, self.flow)
            self.place = ClientPlace(counter, proxies, self.client[0] if self.client else None)
            if not self.place.open():
                refused(RefusalReason.CLIENT_CAP, self.place.peer)
                transport.write(TOO_MANY_RESPONSE)
                transport.close()
                return
            self.timer.arm(limits.header_timeout, self._headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            self.timer.disarm()
            self.place.release()
            self._cut()
            super().connection_lost(exc)
            on_end()
            self.cycle = None  # type: ignore[assignment]
            self.scope = None  # type: ignore[assignment]
            self.headers = None  # type: ignore[assignment]

        def _cut(self) -> None:
            """The connection ends: its requests are cut (:meth:`.PipelineGate.cut`)."""
            self.gate.cut(self.cycle)
            if self.direct is not None:
                self.direct.cut = True
                self.direct = None

        def _unanswered(self) -> int:
            direct = self.direct
            return self.gate.unanswered(self.cycle, direct is not None and not direct.answered)

        def data_received(self, data: bytes) -> None:
            if self.linger.on:
                self.linger.discard(len(data), self.transport)
            else:
                self.gate.received(data, self._read, self._unanswered)

        def _read(self, data: bytes) -> bool:
            """Feed the parser ``data``, refusing a request head over ``max_header_bytes``;
            False once the rest is not this parser's (ending, or upgraded)."""
            room = self.head.room(len(data))
            self._feed(data if room == len(data) else data[:room])
            if room < len(data) and self.head.full:  # over the cap, still in that head: refused
                if not self.linger.on and self.transport.get_protocol() is self:
                    self._head_too_large()
            elif room < len(data) and self.transport.get_protocol() is self:
                self._read(data[room:])  # the head ended within the cap: go on with the rest
            ending = self.linger.on or self.transport.is_closing()
            return not ending and self.transport.get_protocol() is self

        def _feed(self, data: bytes) -> None:
            """uvicorn's ``data_received``, with the refusal of a head over the field cap."""
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if not self.linger.on and not self.transport.is_closing():
                    if self._should_upgrade():
                        self.handle_websocket_upgrade()
                    else:
                        self._unsupported_upgrade_warning()
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, HeadTooLarge):
                    self._head_too_large()
                elif not self.linger.on and not self.transport.is_closing():
                    msg = "Invalid HTTP request received."
                    self.logger.warning(msg)
                    self.send_400_response(msg)
            self.timer.settle()  # a body not complete in this read: timed from now

        def on_header(self, name: bytes, value: bytes) -> None:
            headers = self.headers
            if len(headers) >= max_fields:
                raise HeadTooLarge
            name = name.lower()  # as uvicorn's
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            headers.append((name, value))

        def _head_too_large(self) -> None:
            self.timer.disarm()
            refused(RefusalReason.HEADERS_TOO_LARGE, self.place.client())
            self._refuse(HEAD_TOO_LARGE_RESPONSE)

        def _refuse(self, response: bytes) -> None:
            """Answer ``response`` and end the connection, reading nothing more of it (the
            requests pipelined before it are cut: their answers would come after it)."""
            self._cut()
            self.transport.write(response)
            self.linger.limit = REFUSAL_LINGER_BYTES  # a flood is not read for long
            self._linger()

        def _linger(self) -> None:
            """Half-close (FIN), then discard what the client still sends, then close."""
            self._unset_keepalive_if_required()
            self.gate.drop()  # discarded unparsed, as what comes next
            self.flow.resume_reading()
            self.linger.begin(self.transport, self.timer)

        def on_headers_complete(self) -> None:
            self.timer.disarm()
            self.head.fed = -1
            if self.linger.on:  # ending: what is left of this read is dropped
                return
            if self.place.proxied and not self._hold_forwarded():
                return
            uvicorns = self.expect_100_continue or self.limit_concurrency is not None
            busy = self.cycle is not None and not self.cycle.response_complete
            endpoint = direct_endpoint(
                direct_posts,
                self.parser,
                self.url,
                queued=uvicorns or busy or self.direct is not None,
            )
            if endpoint is None:
                super().on_headers_complete()
            if self.transport.get_protocol() is self and expects_body(self.headers):
                self.body_pending = True
                self.timer.arm_after_read(limits.body_timeout, self._body_late)
                if endpoint is None and self.cycle is not None:
                    _close_if_answered_early(self.cycle, self)
            if endpoint is not None:
                request = self.direct = DirectRequest(self, endpoint)
                request.begin()

        def on_body(self, body: bytes) -> None:
            if self.linger.on:
                return
            request = self.direct
            if request is None or request.read:
                super().on_body(body)
            elif not request.answered:
                request.body(body)

        def on_message_complete(self) -> None:
            self.head.fed = 0  # what follows is the next request's head
            if self.linger.on:
                return
            request = self.direct
            if request is not None and not request.read:
                request.complete()
                return
            self.timer.disarm()
            self.body_pending = False
            super().on_message_complete()

        def on_response_complete(self) -> None:
            self.end_response(body_unread=self.body_pending or self.ending)

        def end_response(self, *, body_unread: bool) -> None:
            if self.place.proxied:
                self.place.release()  # the request's place under its client's address
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if body_unread:  # answered before the body was read: linger, then close
                self._linger()
                return
            emptied = self.gate.take_held(self._read, self._unanswered)
            if self.transport.is_closing() or self.linger.on:
                return
            if emptied:  # all of what was held went: read again
                self.flow.resume_reading()
            if self.cycle is None or self.cycle.response_complete:  # no pipelined request
                self.timer.arm(limits.header_timeout, self._headers_late)  # the next request's

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            if self.direct is not None and not self.direct.answered:  # due first: queue
                self.flow.pause_reading()
                self.pipeline.appendleft((cycle, app))
                return
            self.gate.answering = cycle
            super()._start_asgi_task(cycle, app)

        def send_400_response(self, msg: str) -> None:
            self._cut()  # the requests before the bad one would write to a closed transport
            super().send_400_response(msg)

        def shutdown(self) -> None:
            if self.direct is not None and not self.direct.answered:
                self.direct.keep_alive = False  # answer it, then close
                return
            super().shutdown()

        def handle_websocket_upgrade(self) -> None:
            self.timer.disarm()
            if peer_closed(self.transport):
                # The client gave up while its upgrade waited in this server's backlog: opening
                # it would be work a replica behind a storm cannot spare (see the module's doc).
                log.debug("http_upgrade_abandoned", client=self.place.client())
                self.transport.close()
                return
            factory = direct_paths.get(self.url.partition(b"?")[0].decode("latin-1"))
            if factory is not None:  # uvicorn's own upgrade, to what the factory builds
                self.ws_protocol_class = _upgraded_by(factory)  # type: ignore[assignment]
            super().handle_websocket_upgrade()
            protocol: Any = self.transport.get_protocol()
            if protocol is self:
                return
            self.parser = None  # type: ignore[assignment]  # its callbacks: a cycle with this
            self.timer.disarm()
            _handed_over(protocol, self.place.hand_over())

        def _hold_forwarded(self) -> bool:
            """A request through a trusted proxy: its client's address, from the forwarding
            headers, goes in the scope and holds a place (False: refused, 503)."""
            address, placed = self.place.forwarded(self.headers)  # one place per connection
            self.scope["client"] = (address, 0)
            if not placed:
                refused(RefusalReason.CLIENT_CAP, address)
                self._refuse(TOO_MANY_RESPONSE)
            return placed

        def _headers_late(self) -> None:
            self.timer.fired()
            behind = self.timer.server_behind(limits.header_timeout, self._headers_late)
            if not behind and not self.transport.is_closing():
                refused(RefusalReason.HEADER_TIMEOUT, self.place.client())
                self.transport.write(REQUEST_TIMEOUT_RESPONSE)
                self.transport.close()

        def _body_late(self) -> None:
            self.timer.fired()
            if self.linger.on or self.transport.is_closing():
                return
            if not self.timer.server_behind(limits.body_timeout, self._body_late):
                refused(RefusalReason.BODY_TIMEOUT, self.place.client())
                self.transport.close()

    def _handed_over(protocol: Any, address: str | None) -> None:
        """The place ``address`` of a connection upgraded to ``protocol``: the hub's protocols
        keep it until they close; one that cannot tell when it closes frees it now."""
        if hasattr(protocol, "on_connection_lost"):
            protocol.on_connection_lost = _on_close(address)
        elif address is not None:
            counter.release(address)

    def _on_close(address: str | None) -> Callable[[], None]:
        """What an upgraded connection does when it closes: its place freed, its end told."""

        def closed() -> None:
            if address is not None:
                counter.release(address)
            on_end()

        return closed

    return GuardedHttpProtocol


def _nothing() -> None:
    return None
