"""A hub WebSocket served straight on its asyncio transport: no ASGI app and no task while the
connection is open, so an idle connection costs its few objects and nothing that runs.

:class:`DirectWebSocket` is the protocol the guarded HTTP protocol
(:mod:`~realtime_dispatch.edge.http_protocol`) hands an upgrade of ``/hubs/messenger`` to. The
upgrade handshake and the frames are websockets' sans-I/O
:class:`~websockets.server.ServerProtocol`'s (RFC 6455 checks, masking, fragments, ping and
close frames). Opening a connection (token, per-user cap, handshake, admission) is
the endpoint's own :func:`~.endpoint.serve_websocket`, run in a task that ends once the
connection is admitted: :class:`~.ws_opening.WebSocketOpening` gives it the ASGI-style calls it
uses, and holds what the client sends meanwhile. From then on:

* a message from the client is handed to the connection in ``data_received``
  (:func:`~.endpoint.received`);
* pushes are written by the hub's fan-out straight to the transport (:class:`~.framing.RawSink`,
  as under uvicorn's WebSocket protocol); queued records (pings, completions, the close
  message, whatever waited for backpressure to end) are written by ``_drain``, called soon
  after the connection's wake is set (:class:`~.connection.DrainWake`) and when the transport
  takes writes again;
* the end (a close frame, the transport lost, the connection closing) goes through
  :func:`~.endpoint.detach`, as for the ASGI socket;
* every change to whether the transport takes writes (paused, resumed, a close frame, the
  peer's end, the transport closed or lost) is told to the sink's ``watcher`` at once, so the
  connection's direct-write flag is never stale (:meth:`~.connection.HubConnection.refresh`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.types import Message
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.http11 import Response as HandshakeResponse
from websockets.protocol import State
from websockets.server import ServerProtocol

from realtime_dispatch.hub.connections.connection import Attachment, DrainWake, HubConnection, Wake
from realtime_dispatch.hub.connections.session import CloseReason
from realtime_dispatch.hub.transports.endpoint import detach, disconnect_reason, received
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.ws_opening import WebSocketOpening, open_websocket
from realtime_dispatch.hub.wire.framing import RawSink, records_frame
from realtime_dispatch.hub.wire.protocols import Transport

_frames_log = logging.getLogger("realtime_dispatch.hub.ws_frames")
_frames_log.setLevel(logging.WARNING)  # websockets logs every open and close at info

MAX_FRAME_BYTES = 1 << 20
"""Largest inbound WebSocket message the parser takes (the hub refuses over 32 KB itself)."""


def frames_parser(handshake: ServerProtocol) -> ServerProtocol:
    """A parser of frames alone for the open connection: the handshake's parser keeps the
    upgrade request (its headers: 2.7 KB) alive for as long as it parses."""
    parser = ServerProtocol(state=State.OPEN, max_size=MAX_FRAME_BYTES, logger=_frames_log)
    rest = bytes(handshake.reader.buffer)
    if rest:
        parser.receive_data(rest)
    return parser


class Fragments:
    """A message's frames until its last (:meth:`whole` joins them)."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] | None = None

    def whole(self, frame: Frame) -> bytes | None:
        """The message ``frame`` ends (a whole one, or a fragmented one's last frame); None for
        a fragment before the last, a ping or a pong (the parser answers pings)."""
        if frame.opcode is Opcode.PING or frame.opcode is Opcode.PONG:
            return None
        data = bytes(frame.data)  # the same object when it is bytes already
        parts = self._parts
        if not frame.fin:
            if parts is None:
                self._parts = parts = []
            parts.append(data)
            return None
        if parts is None:
            return data
        self._parts = None
        parts.append(data)
        return b"".join(parts)


class DirectWebSocket(asyncio.Protocol):
    __slots__ = (
        "_attachment",
        "_close_timer",
        "_conn",
        "_connections",
        "_ended",
        "_fragments",
        "_hub",
        "_opening",
        "close_sent",
        "connection",
        "lost",
        "on_connection_lost",
        "transport",
        "watcher",
        "writable",
    )

    def __init__(self, hub: TransportHost, connections: set[Any]) -> None:
        self._hub = hub
        self._connections = connections
        """The server's open connections (uvicorn's ``server_state.connections``): its
        shutdown calls :meth:`shutdown` and waits for the set to empty."""
        self._conn = ServerProtocol(max_size=MAX_FRAME_BYTES, logger=_frames_log)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.writable = Wake()
        self.writable.set()
        self.close_sent = False
        self.watcher: Callable[[], None] | None = None
        """Told whenever the transport may have stopped or started taking writes
        (:meth:`~.framing.RawSink.watch`)."""
        self.connection: HubConnection | None = None
        self.on_connection_lost: Callable[[], None] | None = None
        """Set by the HTTP protocol that upgraded the connection: frees its per-address place."""
        self.lost = False
        """The transport is gone."""
        self._attachment: Attachment | None = None
        self._opening: WebSocketOpening | None = None
        """From a valid upgrade request until the connection is admitted."""
        self._fragments = Fragments()
        self._close_timer: asyncio.TimerHandle | None = None
        self._ended = False

    # asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        conn.receive_data(data)
        for event in conn.events_received():
            if isinstance(event, Frame):
                self._frame(event)
            elif isinstance(event, Request):
                self._opening = open_websocket(self, self._hub, conn, event)
        self._flush()
        if conn.parser_exc is not None and conn.state is not State.CONNECTING:
            self._gone(CloseReason.TRANSPORT_LOST, 1002)  # a protocol violation: already failed

    def eof_received(self) -> bool | None:
        with contextlib.suppress(EOFError):
            self._conn.receive_eof()
        self._flush()
        if not self.transport.is_closing():
            self.transport.close()  # as the transport would once this returns: nothing follows
            self._changed()
        return None

    def pause_writing(self) -> None:
        self.writable.clear()
        self._changed()

    def resume_writing(self) -> None:
        self.writable.set()
        self._drain()  # what waited goes first
        self._changed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._changed()
        self._connections.discard(self)
        callback, self.on_connection_lost = self.on_connection_lost, None
        if callback is not None:
            callback()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self.writable.set()
        self._gone(CloseReason.TRANSPORT_LOST, 1006)

    def shutdown(self) -> None:
        """uvicorn's shutdown: the hub has asked every connection to close already; one still
        being opened is dropped."""
        if self.connection is None and not self.lost:
            if self._opening is not None:
                self._opening.cancel()
            self.transport.close()

    # the opening (:class:`~.ws_opening.WebSocketOpening`) -----------------------------------

    def answer(self, response: HandshakeResponse) -> None:
        """Send the opening's answer to the upgrade: a denial, or its acceptance, after which
        frames alone are parsed."""
        handshake = self._conn
        handshake.send_response(response)
        self._flush()
        if response.status_code == 101:
            self._conn = frames_parser(handshake)

    def attach(self, connection: HubConnection, held: deque[Message] | None) -> None:
        """The connection is admitted: serve it from now on by callbacks, starting with the
        messages ``held`` while it was being opened."""
        self._opening = None
        attachment = Attachment(Transport.WEBSOCKETS, abort=self._abort)
        connection.attachment = self._attachment = attachment
        connection.detached_at = None
        connection.wake = DrainWake(asyncio.get_running_loop(), self._drain)
        self.connection = connection
        if self.lost:
            self._gone(CloseReason.TRANSPORT_LOST, 1006)
            return
        connection.attach_sink(RawSink(self))
        while held:  # what came while it was being admitted, in order
            message = held.popleft()
            if message["type"] == "websocket.disconnect":
                self._gone(disconnect_reason(message["code"]), message["code"])
                return
            self._message(message["bytes"])
        self._drain()

    # frames ------------------------------------------------------------------------------------

    def _frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.CLOSE:
            rcvd = self._conn.close_rcvd
            code = rcvd.code if rcvd is not None else 1005
            self._gone(disconnect_reason(code), code)
            return
        data = self._fragments.whole(frame)
        if data is not None:
            self._message(data)

    def _message(self, data: bytes) -> None:
        if self._ended:
            return
        connection = self.connection
        if connection is None:  # still opening: for the handshake, or held until admitted
            opening = self._opening
            if opening is not None:
                opening.deliver({"type": "websocket.receive", "bytes": data})
            return
        if connection.closing is None and connection.attachment is self._attachment:
            received(connection, data, connection.loop.time())  # no getpid() per message

    # writing and the end -------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write a frame of the opening (its handshake reply); raises once the client is gone."""
        if self.lost or self.transport.is_closing():
            raise ConnectionResetError("the client went away")
        self.transport.write(data)

    def _flush(self) -> None:
        """Write what the parser has to send: the upgrade answer, pongs, close frames; its end
        of the stream closes the transport (the server closes TCP first)."""
        for data in self._conn.data_to_send():
            if self.lost:
                return
            if data:
                self.transport.write(data)
            else:
                self.transport.close()
                self._changed()

    def _drain(self) -> None:
        """Write the connection's queued records while the transport takes them; once it is
        closing, its close message, then the end."""
        connection = self.connection
        if connection is None or connection.attachment is not self._attachment:
            return
        if self.lost:
            return
        binary = connection.protocol.binary
        outbound = connection.outbound
        while connection.closing is None:
            if not outbound.has_pending() or not self.writable.is_set():
                return
            if self.transport.is_closing():
                self._gone(CloseReason.TRANSPORT_LOST, 1006)
                return
            records = connection.due()
            if records:
                self.transport.write(records_frame(records, binary=binary))
                connection.wrote(len(records))
        records = outbound.take_control()
        if records and not self.close_sent and not self.transport.is_closing():
            # even under backpressure: it joins the transport's buffer
            self.transport.write(records_frame(records, binary=binary))
            connection.wrote(len(records))
        self._gone(connection.closing.reason, None)

    def _gone(self, reason: CloseReason, code: int | None) -> None:
        """The socket is done: the client closed it (``code``), it was lost, or the
        connection is closing. Still being opened: the opening sees a disconnect."""
        if self._ended:
            return
        connection, attachment = self.connection, self._attachment
        if connection is None or attachment is None:
            if code is not None:
                if self._opening is not None:
                    self._opening.deliver({"type": "websocket.disconnect", "code": code})
                self._ended = self.lost
            return
        self._ended = True
        self.connection = None
        close_code = detach(self._hub, connection, attachment, reason)
        self.send_close(close_code)

    def send_close(self, code: int) -> None:
        """Send a close frame (once); the transport closes when the client answers it or
        ``close_grace`` later."""
        if self.close_sent or self.lost:
            return
        self.close_sent = True
        self._changed()
        conn = self._conn
        if conn.state is State.OPEN:
            conn.send_close(code)
            self._flush()
        elif conn.state is State.CONNECTING:
            self.transport.close()
            return
        if not self.transport.is_closing():
            grace = self._hub.options.limits.close_grace
            self._close_timer = asyncio.get_running_loop().call_later(grace, self._abort)

    def _changed(self) -> None:
        watcher = self.watcher
        if watcher is not None:
            watcher()

    def _abort(self) -> None:
        with contextlib.suppress(Exception):
            if not self.lost:
                self.transport.close()
        self._changed()
