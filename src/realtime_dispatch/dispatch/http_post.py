"""The worker's HTTP transport to a hub: :class:`PostTransport`, an ``httpx`` transport that
sends a plain-HTTP ``POST`` with its whole body as one write on a kept-alive connection of its
own, and reads the answer itself.

httpx's default transport (httpcore and h11) writes a request's head and its body in two
writes, so the hub reads most requests in two reads, a wake-up each; and its per-request cost
in the worker is several times this one's. Everything else (``https``, other methods, a
streamed body) goes to httpx's default transport, as do requests through a proxy
(httpx routes those before a transport is chosen).

An answer is read by its ``Content-Length``, chunked, or up to the end of the connection; a
connection is reused only after a whole answer without ``Connection: close``. A kept-alive
connection that the hub has closed meanwhile is seen as such before it is used (its end was
read) and dropped. A failure while a request is on its way is raised as httpx's (a timeout as
:class:`httpx.TimeoutException`, anything else as :class:`httpx.TransportError`) and the
connection dropped; nothing is sent again (the dispatcher retries the rows).
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx

MAX_IDLE = 20
"""Kept-alive connections kept per transport (as httpx's default)."""
MAX_HEAD_BYTES = 64 * 1024
"""An answer's status line and headers, at most."""


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class PostTransport(httpx.AsyncBaseTransport):
    def __init__(self, fallback: httpx.AsyncBaseTransport | None = None) -> None:
        self._fallback = fallback if fallback is not None else httpx.AsyncHTTPTransport()
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = _whole_body(request)
        if request.method != "POST" or request.url.scheme != "http" or body is None:
            return await self._fallback.handle_async_request(request)
        timeout = request.extensions.get("timeout", {})
        url = request.url
        where = (url.host, url.port or 80)
        connection = await self._connection(where, timeout.get("connect"))
        try:
            async with asyncio.timeout(timeout.get("read")):
                connection.writer.write(_request_bytes(request, body))
                status, headers, content, keep = await _read_answer(connection.reader)
        except TimeoutError as exc:
            connection.close()
            raise httpx.ReadTimeout("timed out waiting for the hub", request=request) from exc
        except (OSError, EOFError, ValueError, asyncio.LimitOverrunError) as exc:
            connection.close()
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc
        except BaseException:  # cancelled: the answer is not read, the connection is unusable
            connection.close()
            raise
        if keep and connection.usable() and len(self._idle.get(where, ())) < MAX_IDLE:
            self._idle.setdefault(where, []).append(connection)
        else:
            connection.close()
        return httpx.Response(status, headers=headers, content=content)

    async def _connection(self, where: tuple[str, int], within: float | None) -> _Connection:
        idle = self._idle.get(where)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        try:
            async with asyncio.timeout(within):
                reader, writer = await asyncio.open_connection(*where, limit=MAX_HEAD_BYTES)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out connecting to the hub") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()
        for connections in idle.values():
            for connection in connections:
                with contextlib.suppress(OSError):
                    await connection.writer.wait_closed()
        await self._fallback.aclose()


def _whole_body(request: httpx.Request) -> bytes | None:
    """The body when it is known whole (``content=`` bytes), else None."""
    if not isinstance(request.stream, httpx.ByteStream):
        return None
    return request.read()


_SET_HERE = (b"content-length", b"transfer-encoding", b"accept-encoding")
"""Headers this transport writes itself: the body's length, and no compressed answer (it reads
answers as they come)."""


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    url = request.url
    target = url.raw_path  # path and query, as httpx encodes them
    lines = [b"POST %s HTTP/1.1\r\n" % target]
    for name, value in request.headers.raw:
        if name.lower() not in _SET_HERE:
            lines.append(b"%s: %s\r\n" % (name, value))
    lines.append(b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n" % len(body))
    return b"".join((*lines, body))


async def _read_answer(
    reader: asyncio.StreamReader,
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """``(status, headers, body, keep-alive)`` of the next final answer on ``reader``."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head[:-4].split(b"\r\n")
        version, _, rest = status_line.partition(b" ")
        status = int(rest[:3])
        if not version.startswith(b"HTTP/1.") or not 100 <= status <= 599:
            raise ValueError(f"not an HTTP/1.x answer: {status_line[:80]!r}")
        if 100 <= status < 200 and status != 101:  # an interim answer: the final one follows
            continue
        break
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    keep = version == b"HTTP/1.1"
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError("a header line without a colon")
        value = value.strip()
        headers.append((name, value))
        lower = name.strip().lower()
        if lower == b"content-length":
            length = int(value)
        elif lower == b"transfer-encoding":
            chunked = value.lower().endswith(b"chunked")
        elif lower == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            keep = b"keep-alive" in tokens if version == b"HTTP/1.0" else b"close" not in tokens
    if chunked:
        body = await _read_chunked(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    elif status in (204, 304):
        body = b""
    else:  # delimited by the end of the connection
        body, keep = await reader.read(), False
    return status, headers, body, keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("a chunk without its CRLF")
