"""Long polling: ``GET /hubs/messenger?id=<token>`` waits for records and answers 200 with
them (or empty after :data:`POLL_TIMEOUT`), or 204 once the connection has ended; the first
poll answers at once (it only opens the connection). The client sends with ``POST`` and ends
the connection with ``DELETE``. Text or binary bodies, so both hub protocols.

The official clients send no pings over long polling (the polls show they are there), so each
poll counts as hearing from the client for the idle timeout."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response
from starlette.types import Receive

from realtime_dispatch.hub.transports.common import disconnected
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.http_connections import HttpConnectionState

POLL_TIMEOUT = 90.0
"""A poll with nothing to send answers empty after this; the server's pings (every 15 s of
silence) usually answer it first. The official clients give up on a poll after 100 s."""


def _body(state: HttpConnectionState, body: bytes) -> Response:
    binary = state.session.protocol.binary
    return Response(
        body,
        media_type="application/octet-stream" if binary else "text/plain; charset=utf-8",
    )


async def _first_of(future: asyncio.Future[Any], receive: Receive) -> bool:
    """Wait for ``future``, the client leaving or the poll timeout; True if ``future`` is done."""
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        await asyncio.wait(
            (future, gone), timeout=POLL_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        gone.cancel()
    return future.done() and not future.cancelled()


async def poll(hub: TransportHost, state: HttpConnectionState, receive: Receive) -> Response:
    loop = asyncio.get_running_loop()
    if state.connection is None and not state.ended:  # the handshake POST has not come yet
        answered = asyncio.ensure_future(state.answered.wait())
        try:
            await _first_of(answered, receive)
        finally:
            answered.cancel()
    if state.refusal is not None:  # the handshake was refused: its error, once, then 204
        refusal, state.refusal = state.refusal, None
        state.end(loop.time())
        return _body(state, refusal)
    if state.connection is None and not state.ended:
        return _body(state, b"")
    poller = state.poller
    connection = state.connection
    if state.ended and poller is not None:
        farewell = poller.take_farewell()
        if farewell is not None:  # the close message first, the 204 on the next poll
            return _body(state, farewell)
    if state.ended or poller is None or connection is None:
        hub.http_transports.remove(state)
        return Response(status_code=204)
    # A polling client is alive: the official clients send no pings over long polling.
    connection.last_received = loop.time()
    future = poller.poll()
    got = await _first_of(future, receive)
    connection.last_received = loop.time()
    if not got:
        future.cancel()  # the writer hands these records to the next poll instead
        return _body(state, b"")
    body = future.result()
    if body is None:
        hub.http_transports.remove(state)
        return Response(status_code=204)
    return _body(state, body)
