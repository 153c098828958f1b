"""Server-Sent Events (``GET /hubs/messenger?id=<token>`` with ``Accept: text/event-stream``):
server → client records as ``data:`` lines on one long response; the client sends with
``POST``. Text only, so the JSON protocol only. The stream ends when the connection does,
after its close message."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import Receive, Send

from realtime_dispatch.hub.connections.session import CloseReason
from realtime_dispatch.hub.transports.common import disconnected, serve_attached
from realtime_dispatch.hub.transports.host import TransportHost
from realtime_dispatch.hub.transports.http_connections import HttpConnectionState

HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]
OPENING = b":\r\n"
"""A comment, so that the client's EventSource opens before the first record."""


def sse_event(payload: bytes) -> bytes:
    """One event carrying ``payload`` (whole records): a ``data:`` line per line of it."""
    if b"\n" in payload or b"\r" in payload:
        payload = b"\r\ndata: ".join(payload.splitlines())
    return b"data: " + payload + b"\r\n\r\n"


class SseWriter:
    __slots__ = ("_send",)

    def __init__(self, send: Send) -> None:
        self._send = send

    async def writable(self) -> bool:
        return True  # the server's send waits while the socket pushes back

    async def write(self, records: list[bytes]) -> None:
        payload = records[0] if len(records) == 1 else b"".join(records)
        await self._send(
            {"type": "http.response.body", "body": sse_event(payload), "more_body": True}
        )

    async def write_last(self, records: list[bytes]) -> bool:
        await self.write(records)
        return True


async def serve_stream(
    hub: TransportHost, state: HttpConnectionState, receive: Receive, send: Send
) -> None:
    """The stream of one connection: opened now, records once its handshake was accepted."""
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": OPENING, "more_body": True})
    loop = asyncio.get_running_loop()
    reader = asyncio.create_task(
        disconnected(receive), name=f"hub-sse-reader:{state.connection_id}"
    )
    try:
        answered = asyncio.ensure_future(state.answered.wait())
        try:
            await asyncio.wait((answered, reader), return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
        connection = state.connection
        if connection is None or state.ended:  # refused, timed out, gone, or ended by DELETE
            if connection is not None:
                reason = connection.closing.reason if connection.closing else None
                hub.finalize(connection, reason or CloseReason.TRANSPORT_LOST)
            elif state.refusal is not None and not reader.done():
                await SseWriter(send).write([state.refusal])
            reader.cancel()
            state.end(loop.time())
            hub.http_transports.remove(state)
        else:
            await serve_attached(hub, state, SseWriter(send), reader)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    # Bounded: a client that stopped reading (a slow consumer) must not hold this task.
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        async with asyncio.timeout(hub.options.limits.close_grace):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
