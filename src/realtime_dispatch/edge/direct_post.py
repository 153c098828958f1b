"""``POST`` endpoints the guarded HTTP protocol (:mod:`.http_protocol`) answers itself.

A :class:`DirectPost` (the hub's batch endpoint,
:class:`~realtime_dispatch.hub.serving.push_api.DirectBatch`) is answered in the parser's
callbacks, without a request cycle, a task or the ASGI app; only the endpoint's own wait (the
publish) runs in a task. :class:`DirectRequest` is one such request on its way: its
body read (bounded by the endpoint's ``max_body_bytes``), its refusal before the body or its
answer after it, and the response written. :func:`direct_endpoint` tells which requests are
direct; the protocol keeps the connection's state (its timer, a pipelined request waiting, the
lingering close).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

import httptools
import structlog
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.server import ServerState

from realtime_dispatch.edge.http_limits import content_length
from realtime_dispatch.edge.http_timer import ConnectionTimer

log = structlog.get_logger(__name__)

Answer = tuple[int, bytes]
"""A status and its JSON body."""


_LENGTH = b"content-length: %d\r\n\r\n"


class _DefaultHeaders:
    """uvicorn's default headers (``date``, ``server``) and the content type, as the bytes of a
    response head: joined again only when uvicorn replaces its list (once a second, for the
    date), not per response."""

    __slots__ = ("_joined", "_source")

    def __init__(self) -> None:
        self._source: list[tuple[bytes, bytes]] | None = None
        self._joined = b""

    def of(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        if headers is not self._source:
            parts = [b"%s: %s\r\n" % (name, value) for name, value in headers]
            self._joined = b"".join((*parts, b"content-type: application/json\r\n"))
            self._source = headers
        return self._joined


_HEADERS = _DefaultHeaders()


class DirectPost(Protocol):
    """A ``POST`` endpoint the protocol answers itself, without the ASGI app."""

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def too_large(self) -> Answer:
        """The answer to a body over ``max_body_bytes``."""

    @property
    def failure(self) -> Answer:
        """The answer when the endpoint raised."""

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> Answer | None:
        """The answer given once the headers are complete, the body unread; None to read it."""

    def answer(self, body: bytes) -> Answer | Coroutine[Any, Any, Answer]:
        """The answer to the whole body, or the coroutine that gives it."""


def direct_endpoint(
    posts: Mapping[bytes, DirectPost],
    parser: httptools.HttpRequestParser,
    url: bytes,
    *,
    queued: bool,
) -> DirectPost | None:
    """The endpoint of ``posts`` to answer a request (its headers just parsed by ``parser``)
    directly, or None to hand it to uvicorn: not a ``POST`` to one of their paths, an upgrade,
    or ``queued`` (another request is being answered and uvicorn queues this one, or the
    request is uvicorn's to answer: ``Expect: 100-continue``, a concurrency limit)."""
    if not posts or queued or parser.get_method() != b"POST" or parser.should_upgrade():
        return None
    return posts.get(url.partition(b"?")[0])


class DirectHost(Protocol):
    """What a :class:`DirectRequest` uses of the HTTP protocol reading it (uvicorn's
    httptools protocol, and the hub's own state of the connection)."""

    direct: DirectRequest | None
    """The request to a direct POST being read or answered."""
    body_pending: bool
    """A request's body is expected and not read yet."""

    @property
    def transport(self) -> asyncio.Transport: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def tasks(self) -> set[asyncio.Task[None]]: ...

    @property
    def server_state(self) -> ServerState: ...

    @property
    def access_log(self) -> bool: ...

    @property
    def access_logger(self) -> logging.Logger: ...

    @property
    def client(self) -> tuple[str, int] | None: ...

    @property
    def url(self) -> bytes: ...

    @property
    def parser(self) -> httptools.HttpRequestParser: ...

    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...

    @property
    def timer(self) -> ConnectionTimer: ...

    def end_response(self, *, body_unread: bool) -> None:
        """A response is written: release its place, then linger or wait for the next."""


class DirectRequest:
    """A request to a :class:`DirectPost` on its way: its body so far, whether it is all read
    and whether it has been answered (a refusal may come before the body is read)."""

    __slots__ = ("_host", "answered", "cut", "endpoint", "keep_alive", "parts", "read", "size")

    def __init__(self, host: DirectHost, endpoint: DirectPost) -> None:
        self._host = host
        self.endpoint = endpoint
        parser = host.parser
        self.keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        self.parts: list[bytes] = []
        self.size = 0
        self.read = False
        self.answered = False
        self.cut = False
        """The connection ended (or refused a request after it) before it was answered."""

    def begin(self) -> None:
        """The headers are complete: refused now (its body unread), or its body is read."""
        endpoint = self.endpoint
        headers = self._host.headers
        try:
            refusal = endpoint.refusal(headers)
            if refusal is None and content_length(headers) > endpoint.max_body_bytes:
                refusal = endpoint.too_large
        except Exception:
            log.exception("http_direct_failed")
            refusal = endpoint.failure
        if refusal is not None:
            self.answer(refusal)

    def body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > self.endpoint.max_body_bytes:
            self.answer(self.endpoint.too_large)
        else:
            self.parts.append(body)

    def complete(self) -> None:
        """The whole body is read: answer it, now or once the endpoint's coroutine has."""
        host = self._host
        self.read = True
        if self.answered:  # refused before its (empty) body: done with it
            host.direct = None
            return
        host.timer.disarm()
        host.body_pending = False
        endpoint = self.endpoint
        try:
            answer = endpoint.answer(b"".join(self.parts))
        except Exception:
            log.exception("http_direct_failed")
            answer = endpoint.failure
        if isinstance(answer, tuple):
            self.answer(answer)
            return
        task = host.loop.create_task(self._answer_published(answer))
        host.tasks.add(task)  # uvicorn's shutdown waits for it
        task.add_done_callback(host.tasks.discard)

    async def _answer_published(self, pending: Coroutine[Any, Any, Answer]) -> None:
        try:
            answer = await pending
        except Exception:
            log.exception("http_direct_failed")
            answer = self.endpoint.failure
        if self.cut or self._host.transport.is_closing():  # the client is gone: nobody to answer
            if self._host.direct is self:
                self._host.direct = None
            return
        self.answer(answer)

    def answer(self, answer: Answer) -> None:
        host = self._host
        self.answered = True
        if self.read:
            host.direct = None
        body_unread = not self.read and host.body_pending
        ending = not self.keep_alive or body_unread
        self._write(answer, close=ending)
        if not self.keep_alive and not body_unread:
            host.transport.close()
        host.end_response(body_unread=body_unread)

    def _write(self, answer: Answer, *, close: bool) -> None:
        host = self._host
        status, body = answer
        head = _HEADERS.of(host.server_state.default_headers)
        length = b"content-length: %d\r\nconnection: close\r\n\r\n" if close else _LENGTH
        host.transport.write(b"".join((STATUS_LINE[status], head, length % len(body), body)))
        if host.access_log:
            client = f"{host.client[0]}:{host.client[1]}" if host.client else "-"
            url, version = host.url.decode("latin-1"), host.parser.get_http_version()
            host.access_logger.info('%s - "POST %s HTTP/%s" %d', client, url, version, status)
