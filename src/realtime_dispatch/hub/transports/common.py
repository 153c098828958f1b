"""What the Server-Sent Events and long-polling routes share: authenticating each request
(negotiate and the WebSocket authenticate the same way), finding its connection by token,
reading a ``POST``, and serving an admitted connection on a transport until it ends (the
counterpart of the WebSocket's run in :mod:`.endpoint`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

import structlog
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.tokens import (
    AuthError,
    KeysUnavailable,
    request_token,
    www_authenticate,
)
from realtime_dispatch.hub.connections.connection import Attachment, Writer, write_loop
from realtime_dispatch.hub.connections.session import CloseReason
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.http_connections import HttpConnectionState
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)

MAX_POST_BYTES = 1 << 20
"""A ``POST`` may batch several records (each is bounded by the connection's limit)."""
NO_CONNECTION = (
    "No connection with that ID on this hub replica: it has ended, or it was negotiated on "
    "another replica (Server-Sent Events and long polling need sticky sessions after "
    "negotiate)."
)


class Refused(Exception):
    """A request answered with ``response`` instead of being served."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class Credentialed(Protocol):
    """Where a token is read from: a request's or a WebSocket's headers and query string."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def query_params(self) -> Mapping[str, str]: ...


async def identity_of(hub: TransportHost, request: Credentialed, transport: str) -> Identity:
    """The verified identity of a request's token (negotiate, the WebSocket, SSE, long
    polling): 401 when it is refused (expired, revoked, forged...), 503 when the identity
    provider's keys are unavailable."""
    try:
        return await hub.verifier.verify(request_token(request.headers, request.query_params))
    except AuthError as exc:
        log.info("hub_auth_refused", code=exc.code, transport=transport)
        raise Refused(_unauthorized(exc)) from exc
    except KeysUnavailable as exc:
        log.warning("hub_auth_unavailable", transport=transport)
        raise Refused(PlainTextResponse("Service Unavailable", status_code=503)) from exc


def _unauthorized(exc: AuthError) -> Response:
    headers = {"WWW-Authenticate": www_authenticate(exc)}
    return PlainTextResponse("Unauthorized", status_code=401, headers=headers)


def state_of(hub: TransportHost, request: Request, user_id: Key) -> HttpConnectionState:
    """The connection named by ``id``: 404 when this replica has none, 403 for another user."""
    state = hub.http_transports.get(request.query_params.get("id"))
    if state is None:
        raise Refused(PlainTextResponse(NO_CONNECTION, status_code=404))
    if state.user_id != user_id:
        raise Refused(PlainTextResponse("Forbidden", status_code=403))
    return state


def require_id(request: Request) -> str:
    token = request.query_params.get("id")
    if not token:
        raise Refused(PlainTextResponse("Connection ID required", status_code=400))
    return token


async def read_body(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_POST_BYTES:
            raise Refused(PlainTextResponse("Payload too large", status_code=413))
        chunks.append(chunk)
    return b"".join(chunks)


async def disconnected(receive: Receive) -> CloseReason:
    """Wait until the client goes away (its request body, if any, already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return CloseReason.TRANSPORT_LOST


async def serve_attached(
    hub: TransportHost,
    state: HttpConnectionState,
    writer: Writer,
    reader: asyncio.Task[CloseReason] | None,
) -> None:
    """Attach the admitted connection of ``state`` to its transport (``writer``, and ``reader``
    telling when the client went away, if the transport can) and serve it until it ends."""
    connection = state.connection
    assert connection is not None
    loop = asyncio.get_running_loop()
    name = connection.connection_id
    write_task = asyncio.create_task(write_loop(connection, writer), name=f"hub-writer:{name}")
    attachment = Attachment(connection.transport, reader=reader, writer=write_task)
    connection.attachment = attachment
    if connection.closing is not None:  # closed before the writer existed
        attachment.force_close = loop.call_later(connection.limits.close_grace, write_task.cancel)
    tasks = (write_task,) if reader is None else (reader, write_task)
    ended = CloseReason.TRANSPORT_LOST
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if reader is not None and reader.done() and not reader.cancelled():
            ended = reader.result()
        if connection.closing is not None and not write_task.done():
            await asyncio.wait((write_task,))  # delivers the close message (bounded)
    except asyncio.CancelledError:
        hub.finalize(connection, CloseReason.SHUTDOWN)
        raise
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if attachment.force_close is not None:
            attachment.force_close.cancel()
        connection.attachment = None
        state.end(loop.time())
    hub.finalize(connection, connection.closing.reason if connection.closing else ended)
