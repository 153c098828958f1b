"""``GET``/``POST``/``DELETE /hubs/messenger?id=<connectionToken>``: the HTTP side of SignalR's
transport protocol, beside the WebSocket route on the same path.

* ``GET`` with ``Accept: text/event-stream`` opens a Server-Sent Events stream (:mod:`.sse`);
  any other ``GET`` is a long poll (:mod:`.longpolling`). The first ``GET`` of a token claims
  its negotiation; a token this replica did not negotiate gets 404.
* ``POST`` carries records from the client: first the handshake, after which the connection is
  admitted (:func:`~.admission.admit`, as on the WebSocket) and the handshake answered on the
  stream or poll; then anything else, read by the connection's session.
* ``DELETE`` ends a connection (long polling's way to stop; accepted for both).

Every request carries the token as the WebSocket does (``Authorization: Bearer``, or
``access_token`` in the query where an EventSource cannot set headers), for the connection's
user.
"""

from __future__ import annotations

import asyncio

import structlog
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub.connections.caps import ConnectionRefused
from realtime_dispatch.hub.connections.connection import apply, receive
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest, InboundSession
from realtime_dispatch.hub.transports.admission import AdmissionRefused, admit
from realtime_dispatch.hub.transports.common import (
    NO_CONNECTION,
    Refused,
    identity_of,
    read_body,
    require_id,
    serve_attached,
    state_of,
)
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.http_connections import HttpConnectionState, LongPollWriter
from realtime_dispatch.hub.transports.longpolling import poll
from realtime_dispatch.hub.transports.sse import serve_stream
from realtime_dispatch.hub.wire.protocol import HANDSHAKE_OK, handshake_error
from realtime_dispatch.hub.wire.protocols import Transport
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)


class HttpTransportEndpoint:
    """The ASGI app of the HTTP transports for one hub."""

    def __init__(self, hub: TransportHost) -> None:
        self._hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            if request.method == "GET":
                if "text/event-stream" in request.headers.get("accept", ""):
                    user_id = (
                        await identity_of(self._hub, request, Transport.SERVER_SENT_EVENTS.value)
                    ).user_id
                    state = self._open(request, Transport.SERVER_SENT_EVENTS, user_id)
                    await serve_stream(self._hub, state, receive, send)
                    return
                response = await self._poll(request, receive)
            elif request.method == "POST":
                response = await self._post(request)
            elif request.method == "DELETE":
                response = await self._delete(request)
            else:  # HEAD, which the route adds to GET
                response = PlainTextResponse("Method Not Allowed", status_code=405)
        except Refused as refused:
            response = refused.response
        await response(scope, receive, send)

    def _open(self, request: Request, transport: Transport, user_id: Key) -> HttpConnectionState:
        """Claim the negotiation named by ``id`` for a new SSE or long-polling connection."""
        hub = self._hub
        if hub.stopping:
            raise Refused(PlainTextResponse("Service Unavailable", status_code=503))
        token = require_id(request)
        existing = hub.http_transports.get(token)
        if existing is not None:
            status = 409 if existing.user_id == user_id else 403
            raise Refused(PlainTextResponse("Connection already in use", status_code=status))
        try:  # the per-user cap, as at a WebSocket upgrade: the place is held from now on
            reservation = hub.admit_connection(user_id, "open")
        except ConnectionRefused as exc:
            raise Refused(PlainTextResponse(str(exc), status_code=exc.status)) from exc
        now = asyncio.get_running_loop().time()
        negotiation = hub.negotiations.claim(token, user_id, now=now)
        if negotiation is None:
            reservation.release()
            raise Refused(PlainTextResponse(NO_CONNECTION, status_code=404))
        state = HttpConnectionState(
            key=token,
            transport=transport,
            connection_id=negotiation.connection_id,
            token=negotiation.token,
            user_id=user_id,
            session=InboundSession(
                max_record_chars=hub.options.limits.max_message_bytes,
                stateful_allowed=False,  # the clients resume WebSockets only
                binary_allowed=transport.binary,
            ),
            created_at=now,
            poller=LongPollWriter() if transport is Transport.LONG_POLLING else None,
            reservation=reservation,
        )
        hub.http_transports.add(state)
        return state

    async def _poll(self, request: Request, receive: Receive) -> Response:
        hub = self._hub
        user_id = (await identity_of(hub, request, Transport.LONG_POLLING.value)).user_id
        state = hub.http_transports.get(require_id(request))
        if state is None:  # the first poll opens the connection and answers at once
            self._open(request, Transport.LONG_POLLING, user_id)
            return Response(status_code=200)
        if state.user_id != user_id:
            raise Refused(PlainTextResponse("Forbidden", status_code=403))
        if state.transport is not Transport.LONG_POLLING:
            raise Refused(PlainTextResponse("Connection uses another transport", status_code=400))
        return await poll(hub, state, receive)

    async def _post(self, request: Request) -> Response:
        hub = self._hub
        identity = await identity_of(hub, request, "post")
        state = state_of(hub, request, identity.user_id)
        body = await read_body(request)
        async with state.lock:
            if state.ended:
                raise Refused(PlainTextResponse(NO_CONNECTION, status_code=404))
            connection = state.connection
            if connection is None:
                await self._handshake(state, body, identity)
                return Response(status_code=200)
            connection.last_received = asyncio.get_running_loop().time()
            receive(connection, body)
        return Response(status_code=200)

    async def _handshake(self, state: HttpConnectionState, body: bytes, identity: Identity) -> None:
        """The first ``POST``: the handshake (and whatever follows it in the body). The
        connection is admitted with this request's ``identity``: its token's expiry is the
        connection's."""
        hub = self._hub
        loop = asyncio.get_running_loop()
        inbound = state.session.feed(body)
        if inbound.handshake_reply_error is not None:
            hub.metrics.disconnects.labels(CloseReason.HANDSHAKE_FAILED.value).inc()
            log.info("hub_handshake_failed", connection_id=state.connection_id)
            state.refusal = handshake_error(inbound.handshake_reply_error).encode()
            state.end(loop.time())
            return
        if inbound.handshake is None:
            return  # incomplete: the rest comes in the next POST
        reservation = state.reservation  # held since the first GET
        assert reservation is not None
        try:
            connection = await admit(
                hub,
                connection_id=state.connection_id,
                token=state.token,
                identity=identity,
                session=state.session,
                transport=state.transport,
                reservation=reservation,
            )
        except AdmissionRefused as exc:
            state.refusal = handshake_error(str(exc)).encode()
            state.end(loop.time())
            return
        finally:
            reservation.release()  # a no-op once the connection registered
        if state.ended:  # the stream went away while the connection was being admitted
            hub.finalize(connection, CloseReason.TRANSPORT_LOST)
            return
        # Before anything queued, even the close message of a connection revoked meanwhile.
        connection.outbound.push_control(HANDSHAKE_OK.encode(), first=True)
        state.connection = connection
        apply(connection, inbound)
        if state.poller is not None:
            hub.http_transports.spawn(
                f"hub-longpolling:{state.connection_id}",
                serve_attached(hub, state, state.poller, None),
            )
        state.answered.set()

    async def _delete(self, request: Request) -> Response:
        hub = self._hub
        state = state_of(hub, request, (await identity_of(hub, request, "delete")).user_id)
        if state.connection is not None:
            state.connection.close(CloseRequest(CloseReason.CLIENT_CLOSE, None))
        state.end(asyncio.get_running_loop().time())
        return PlainTextResponse("", status_code=202)
