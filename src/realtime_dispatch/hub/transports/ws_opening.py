"""The opening of a direct WebSocket: :class:`WebSocketOpening`, what the endpoint's
:func:`~.endpoint.serve_websocket` talks to while a :class:`~.ws_direct.DirectWebSocket`'s
connection is being opened (token, per-user cap, handshake, admission).

It gives that opening the ASGI-style calls of Starlette's WebSocket
(:class:`~.endpoint.DirectSocket`) over the socket's transport: the upgrade request's headers
and query, the handshake's answer (the upgrade accepted, or a denial), frames written, and the
client's messages held in order until the connection is admitted (reading pauses past
``INBOX_HIGH`` of them). Once admitted, the socket serves the connection by its callbacks and
this object is dropped: nothing of it runs per frame of an open connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

import structlog
from starlette.datastructures import Headers, QueryParams
from starlette.responses import Response
from starlette.types import Message
from websockets.http11 import Request
from websockets.http11 import Response as HandshakeResponse
from websockets.server import ServerProtocol

from realtime_dispatch.hub.connections.connection import HubConnection
from realtime_dispatch.hub.transports.endpoint import serve_websocket
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.wire.framing import ws_frame

log = structlog.get_logger(__name__)

INBOX_HIGH = 16
"""Messages held while a connection is being opened before reading pauses."""

DENIAL_HEADERS = frozenset({"www-authenticate", "retry-after"})
"""Headers of a denial response passed to the client (the rest are the handshake's own)."""


class OpeningSocket(Protocol):
    """What an opening uses of its socket (a :class:`~.ws_direct.DirectWebSocket`)."""

    @property
    def lost(self) -> bool:
        """The transport is gone."""
        ...

    @property
    def transport(self) -> asyncio.Transport: ...

    def answer(self, response: HandshakeResponse) -> None: ...

    def write(self, data: bytes) -> None: ...

    def send_close(self, code: int) -> None: ...

    def attach(self, connection: HubConnection, held: deque[Message] | None) -> None: ...


def open_websocket(
    socket: OpeningSocket, hub: TransportHost, handshake: ServerProtocol, request: Request
) -> WebSocketOpening | None:
    """The opening of ``request``, a valid WebSocket upgrade; None, the refusal sent, if not."""
    response = handshake.accept(request)
    if response.status_code != 101:
        handshake.send_response(response)
        return None
    return WebSocketOpening(socket, hub, handshake, request, response)


class WebSocketOpening:
    """One direct WebSocket's opening, from its valid upgrade request until it is admitted."""

    __slots__ = (
        "_handshake",
        "_inbox",
        "_paused_reading",
        "_request",
        "_response",
        "_socket",
        "_task",
        "_waiter",
    )

    def __init__(
        self,
        socket: OpeningSocket,
        hub: TransportHost,
        handshake: ServerProtocol,
        request: Request,
        response: HandshakeResponse,
    ) -> None:
        self._socket = socket
        self._handshake: ServerProtocol | None = handshake
        """The socket's parser of the upgrade (it builds a denial), until it is answered."""
        self._request: Request | None = request
        self._response: HandshakeResponse | None = response
        """The upgrade's acceptance, until it is sent (or a denial sent instead)."""
        self._inbox: deque[Message] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._run(hub), name="hub-websocket-open"
        )

    async def _run(self, hub: TransportHost) -> None:
        try:
            await serve_websocket(hub, self)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("hub_websocket_open_failed")
            self._socket.send_close(1011)
        finally:
            self._task = None
            self._handshake = self._request = self._response = None

    def cancel(self) -> None:
        """The server shuts down: the opening under way, if any, ends."""
        if self._task is not None:
            self._task.cancel()

    # the calls of serve_websocket -----------------------------------------------------------

    @property
    def headers(self) -> Headers:
        request = self._request
        assert request is not None
        return Headers(headers={k.lower(): v for k, v in request.headers.raw_items()})

    @property
    def query_params(self) -> QueryParams:
        request = self._request
        assert request is not None
        _, _, query = request.path.partition("?")
        return QueryParams(query)

    async def accept(self) -> None:
        response, self._response = self._response, None
        if response is None or self._socket.lost:
            raise ConnectionResetError("the client went away")
        self._handshake = None
        self._socket.answer(response)

    async def receive(self) -> Message:
        inbox = self._inbox
        if inbox is None:
            inbox = self._inbox = deque()
        while not inbox:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        message = inbox.popleft()
        if self._paused_reading and len(inbox) < INBOX_HIGH // 2:
            self._resume_reading()
        return message

    async def send_text(self, data: str) -> None:
        self._socket.write(ws_frame(data.encode(), binary=False))

    async def send_bytes(self, data: bytes) -> None:
        self._socket.write(ws_frame(data, binary=True))

    async def send_denial_response(self, response: Response) -> None:
        self._response = None
        handshake, self._handshake = self._handshake, None
        if self._socket.lost or handshake is None:
            return
        rejection = handshake.reject(response.status_code, bytes(response.body).decode())
        for name, value in response.headers.items():
            if name in DENIAL_HEADERS:
                rejection.headers[name] = value
        self._socket.answer(rejection)

    async def close(self, code: int = 1000) -> None:
        self._socket.send_close(code)

    def attach(self, connection: HubConnection) -> None:
        """The connection is admitted: its socket serves it from now on, the messages held
        meanwhile first, in order."""
        self._request = None
        held, self._inbox = self._inbox, None
        if self._paused_reading:
            self._resume_reading()
        self._socket.attach(connection, held)

    # the client's messages, held ------------------------------------------------------------

    def deliver(self, message: Message) -> None:
        """Hold a message of the client (or its disconnect) for :meth:`receive`."""
        inbox = self._inbox
        if inbox is None:
            inbox = self._inbox = deque()
        inbox.append(message)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        socket = self._socket
        if len(inbox) >= INBOX_HIGH and not self._paused_reading and not socket.lost:
            self._paused_reading = True
            socket.transport.pause_reading()

    def _resume_reading(self) -> None:
        self._paused_reading = False
        if not self._socket.lost:
            self._socket.transport.resume_reading()
