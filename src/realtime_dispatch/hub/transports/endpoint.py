"""``GET /hubs/messenger`` (WebSocket): authenticate, handshake, admit (:mod:`.admission`),
then run a reader and a writer task until the connection ends, or until its transport drops and
(stateful reconnect) the client resumes it on a new WebSocket with the same connection token.
Text frames carry the JSON protocol, binary frames MessagePack.

Under the hub's own server (:func:`~.server.uvicorn_config` given the hub) the socket is a
:class:`~.ws_direct.DirectWebSocket`: the same opening runs in a task, and once the connection
is admitted it is served by the socket's callbacks with no task at all. Under any other ASGI
server it is Starlette's :class:`~starlette.websockets.WebSocket`, served by a reader and a
writer task.

This module only translates frames; protocol rules live in :mod:`.session`, buffering in
:mod:`.outbound`, groups in :mod:`.registry`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Protocol

import structlog
from starlette.responses import PlainTextResponse, Response
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub.connections.caps import ConnectionRefused, Reservation
from realtime_dispatch.hub.connections.connection import (
    Attachment,
    HubConnection,
    WebSocketWriter,
    apply,
    receive,
    write_loop,
)
from realtime_dispatch.hub.connections.session import (
    CloseReason,
    CloseRequest,
    Inbound,
    InboundSession,
)
from realtime_dispatch.hub.transports.admission import AdmissionRefused, admit
from realtime_dispatch.hub.transports.common import Refused, identity_of
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.negotiate import new_connection_id
from realtime_dispatch.hub.wire.framing import RawSink
from realtime_dispatch.hub.wire.protocol import HANDSHAKE_OK, handshake_error
from realtime_dispatch.hub.wire.protocols import Transport

log = structlog.get_logger(__name__)

NORMAL_CLOSE_CODES = frozenset({1000, 1001})
TOO_BIG_ERROR = "Connection closed with an error: message too big."


class OpeningSocket(Protocol):
    """What opening a connection uses of its WebSocket: the ASGI messages and calls of
    Starlette's :class:`~starlette.websockets.WebSocket`."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def query_params(self) -> Mapping[str, str]: ...

    async def accept(self) -> None: ...

    async def receive(self) -> Message: ...

    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def send_denial_response(self, response: Response) -> None: ...

    async def close(self, code: int = 1000) -> None: ...


class DirectSocket(OpeningSocket, Protocol):
    """A socket that serves an admitted connection itself, by callbacks."""

    def attach(self, connection: HubConnection) -> None: ...


async def serve_websocket(hub: TransportHost, websocket: WebSocket | DirectSocket) -> None:
    if hub.stopping:
        await _deny(websocket, 503, "Service Unavailable")
        return
    try:
        identity = await identity_of(hub, websocket, "websocket")
    except Refused as refused:
        await _deny_response(websocket, refused.response)
        return
    id_param = websocket.query_params.get("id")
    existing = hub.resumable(id_param, identity.user_id)
    if existing is not None:
        hub.reidentify(existing, identity)
        await _resume(hub, websocket, existing)
        return
    try:
        reservation = hub.admit_connection(identity.user_id, "open")
    except ConnectionRefused as exc:
        await _deny(websocket, exc.status, str(exc))
        return
    try:
        await _open(hub, websocket, identity, id_param, reservation)
    finally:
        reservation.release()  # a no-op once the connection registered


async def _deny(websocket: OpeningSocket, status: int, text: str) -> None:
    await _deny_response(websocket, PlainTextResponse(text, status_code=status))


async def _deny_response(websocket: OpeningSocket, response: Response) -> None:
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:  # a server without the denial-response extension
        await websocket.close(code=1008)


def _too_big(data: str | bytes, limit: int) -> bool:
    if len(data) > limit:
        return isinstance(data, bytes) or len(data.encode()) > limit
    return False


async def _handshake(
    websocket: OpeningSocket, session: InboundSession, limit: int
) -> Inbound | None:
    """Read until the handshake record is complete; None if it failed (already answered)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is None:
            continue
        if _too_big(data, limit):
            await websocket.send_text(handshake_error("Handshake message too big."))
            return None
        inbound = session.feed(data)
        if inbound.handshake_reply_error is not None:
            await websocket.send_text(handshake_error(inbound.handshake_reply_error))
            return None
        if inbound.handshake is not None:
            return inbound


async def _open(
    hub: TransportHost,
    websocket: WebSocket | DirectSocket,
    identity: Identity,
    id_param: str | None,
    reservation: Reservation,
) -> None:
    loop = asyncio.get_running_loop()
    options = hub.options
    limits = options.limits
    negotiation = hub.negotiations.claim(id_param, identity.user_id, now=loop.time())
    if negotiation is not None:
        connection_id, token, stateful = (
            negotiation.connection_id,
            negotiation.token,
            negotiation.stateful,
        )
    else:
        connection_id = new_connection_id()
        token, stateful = connection_id, False
    await websocket.accept()
    session = InboundSession(max_record_chars=limits.max_message_bytes, stateful_allowed=stateful)
    inbound: Inbound | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(options.handshake_timeout):
            inbound = await _handshake(websocket, session, limits.max_message_bytes)
    if inbound is None:
        hub.metrics.disconnects.labels(CloseReason.HANDSHAKE_FAILED.value).inc()
        log.info("hub_handshake_failed", connection_id=connection_id)
        await _close_socket(websocket, 1000)
        return
    try:
        connection = await admit(
            hub,
            connection_id=connection_id,
            token=token,
            identity=identity,
            session=session,
            transport=Transport.WEBSOCKETS,
            reservation=reservation,
        )
    except AdmissionRefused as exc:
        await _send_handshake_reply(websocket, session, handshake_error(str(exc)))
        await _close_socket(websocket, 1011 if exc.code == "MembershipUnavailable" else 1008)
        return
    try:
        await _send_handshake_reply(websocket, session, HANDSHAKE_OK)
    except Exception:
        hub.finalize(connection, CloseReason.TRANSPORT_LOST)
        raise
    apply(connection, inbound)
    await _run(hub, connection, websocket)


async def _send_handshake_reply(
    websocket: OpeningSocket, session: InboundSession, text: str
) -> None:
    """The handshake answer is JSON text; a binary protocol's connection gets it in a binary
    frame like everything after it."""
    if session.protocol.binary:
        await websocket.send_bytes(text.encode())
    else:
        await websocket.send_text(text)


async def _resume(
    hub: TransportHost, websocket: WebSocket | DirectSocket, connection: HubConnection
) -> None:
    old = connection.attachment
    connection.attachment = None
    connection.attach_sink(None)
    if old is not None:
        old.stop()
    await websocket.accept()
    connection.session.new_transport()
    sequence = connection.outbound.rewind()
    connection.outbound.push_control(connection.protocol.sequence(sequence))
    connection.last_received = asyncio.get_running_loop().time()
    log.info(
        "hub_resumed", connection_id=connection.connection_id, replay=connection.outbound.pending
    )
    await _run(hub, connection, websocket)


def disconnect_reason(code: int) -> CloseReason:
    """Why a connection ended whose client closed the WebSocket with ``code``."""
    return CloseReason.CLIENT_CLOSE if code in NORMAL_CLOSE_CODES else CloseReason.TRANSPORT_LOST


def received(connection: HubConnection, data: str | bytes, now: float) -> CloseReason | None:
    """Act on one WebSocket message of an open connection; the reason it is closing now, if it
    is (its writer then sends the close message)."""
    if _too_big(data, connection.limits.max_message_bytes):
        connection.close(CloseRequest(CloseReason.MESSAGE_TOO_BIG, TOO_BIG_ERROR))
        return CloseReason.MESSAGE_TOO_BIG
    connection.last_received = now
    inbound = receive(connection, data)
    if connection.closing is None:
        return None
    if (
        inbound is not None
        and inbound.close is not None
        and inbound.close.reason is not CloseReason.CLIENT_CLOSE
    ):
        log.info(
            "hub_protocol_error",
            connection_id=connection.connection_id,
            reason=inbound.close.reason.value,
        )
    return connection.closing.reason


def detach(
    hub: TransportHost, connection: HubConnection, attachment: Attachment, ended: CloseReason
) -> int:
    """The socket of ``attachment`` is done with ``connection``: it ``ended`` for that reason
    (or the connection is closing). The connection ends, or (stateful, transport lost) waits
    to resume; returns the code to close the socket with."""
    if connection.attachment is not attachment:  # a new transport took over (resume)
        return 1000
    connection.attachment = None
    connection.attach_sink(None)
    if connection.closing is not None:
        hub.finalize(connection, connection.closing.reason)
        return 1009 if connection.closing.reason is CloseReason.MESSAGE_TOO_BIG else 1000
    if connection.stateful and ended is CloseReason.TRANSPORT_LOST and not hub.stopping:
        connection.detached_at = asyncio.get_running_loop().time()
        log.info("hub_transport_lost", connection_id=connection.connection_id, resumable=True)
        return 1000
    hub.finalize(connection, ended)
    return 1000


async def _read_loop(connection: HubConnection, websocket: WebSocket) -> CloseReason:
    loop = asyncio.get_running_loop()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return disconnect_reason(message.get("code", 1006))
        data = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is None:
            continue
        closing = received(connection, data, loop.time())
        if closing is not None:
            return closing


async def _run(
    hub: TransportHost, connection: HubConnection, websocket: WebSocket | DirectSocket
) -> None:
    if not isinstance(websocket, WebSocket):
        websocket.attach(connection)
        return
    attachment = Attachment(Transport.WEBSOCKETS)
    connection.attachment = attachment
    connection.detached_at = None
    name = connection.connection_id
    sink = RawSink.from_scope(websocket.scope)
    writer = asyncio.create_task(
        write_loop(connection, WebSocketWriter(websocket, sink, binary=connection.protocol.binary)),
        name=f"hub-writer:{name}",
    )
    reader = asyncio.create_task(_read_loop(connection, websocket), name=f"hub-reader:{name}")
    attachment.writer, attachment.reader = writer, reader
    connection.attach_sink(sink)
    if connection.closing is not None:  # closed before the writer existed
        attachment.force_close = asyncio.get_running_loop().call_later(
            connection.limits.close_grace, writer.cancel
        )
    ended = CloseReason.TRANSPORT_LOST
    try:
        await asyncio.wait((reader, writer), return_when=asyncio.FIRST_COMPLETED)
        if reader.done() and not reader.cancelled():
            ended = reader.result()
        if connection.closing is not None and not writer.done():
            await asyncio.wait((writer,))  # flushes the close message (bounded by close_grace)
    except asyncio.CancelledError:
        hub.finalize(connection, CloseReason.SHUTDOWN)
        raise
    finally:
        if connection.attachment is attachment:
            connection.attach_sink(None)
        for task in (reader, writer):
            task.cancel()
        await asyncio.gather(reader, writer, return_exceptions=True)
        if attachment.force_close is not None:
            attachment.force_close.cancel()
    await _close_socket(websocket, detach(hub, connection, attachment, ended))


async def _close_socket(websocket: OpeningSocket, code: int) -> None:
    if isinstance(websocket, WebSocket) and (
        websocket.application_state is WebSocketState.DISCONNECTED
        or websocket.client_state is WebSocketState.DISCONNECTED
    ):
        return
    with contextlib.suppress(Exception):
        await websocket.close(code=code)
