"""A worker of ``--workers N`` forwards a request for another worker's connection to it.

The parent hands a TCP connection to a worker by its first request (``realtime_dispatch.cli.
workers``); a keep-alive connection then carries the client's later requests to that worker. A
client whose pool mixes several hub connections (a browser's six per origin, Node's global
agent) can send an SSE ``POST`` or a long poll of worker 1's connection on a connection that
worker 0 holds. :func:`forwarding` sends such a request (its ``?id=`` names another worker) to
that worker over its Unix socket and streams the answer back: an SSE stream stays open as long
as the client keeps it. Anything else goes to ``app``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from realtime_dispatch.hub.transports.negotiate import worker_of

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-connection",
        b"content-length",
    }
)
READ_BYTES = 65536


def named_worker(scope: Scope) -> int | None:
    """The worker the request's ``id`` names (None: none)."""
    query = scope.get("query_string", b"")
    if b"id=" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1")):
        if name == "id":
            return worker_of(value)
    return None


def forwarding(app: ASGIApp, own: int, socket_of: Callable[[int], str], path: str) -> ASGIApp:
    """``app`` for this worker (``own``); requests to ``path`` naming another worker go to its
    socket (``socket_of(worker)``)."""

    async def forwarder(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == path:
            worker = named_worker(scope)
            if worker is not None and worker != own:
                await forward(scope, receive, send, socket_of(worker))
                return
        await app(scope, receive, send)

    return forwarder


async def forward(scope: Scope, receive: Receive, send: Send, socket_path: str) -> None:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    try:
        reader, writer = await asyncio.open_unix_connection(socket_path)
    except OSError:  # that worker is restarting: its connection is gone
        await _plain(send, 404, b"No Connection with that ID")
        return
    try:
        query = scope["query_string"]
        target = scope["raw_path"] + (b"?" + query if query else b"")
        lines = [b"%s %s HTTP/1.1" % (scope["method"].encode(), target)]
        lines += [b"%s: %s" % (k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
        lines += [b"content-length: %d" % len(body), b"connection: close"]
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head[:-4].split(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        headers = []
        chunked = False
        for line in header_lines:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            if name not in HOP_BY_HOP:
                headers.append((name, value))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        watcher = asyncio.create_task(_disconnected(receive))
        watcher.add_done_callback(lambda _: writer.close())  # the client left: end the read
        try:
            chunks = _dechunked(reader) if chunked else _until_eof(reader)
            async for chunk in chunks:
                if watcher.done():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            watcher.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        return
    finally:
        writer.close()


async def _disconnected(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _until_eof(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while chunk := await reader.read(READ_BYTES):
        yield chunk


async def _dechunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


async def _plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    with contextlib.suppress(OSError):
        await send({"type": "http.response.body", "body": body})
