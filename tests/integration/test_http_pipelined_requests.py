"""Pipelined HTTP/1.1 requests against the guarded protocol (docs/RELIABILITY.md, H28 and H29):
at most ``max_pipelined`` parsed ahead of their answers whatever the client sends, every answer
in order, a refusal or a cut connection without a traceback, and a closed connection's objects
freed by reference counting alone (no cyclic GC needed). The server is the guarded protocol
under uvicorn in this test's loop, with an app whose answers the test holds back."""

import asyncio
import contextlib
import functools
import gc
import logging
import socket
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn

from realtime_dispatch.edge.http_protocol import HttpLimits, guarded_http_protocol
from realtime_dispatch.edge.pipelining import GatedFlow
from support.procs import wait_until

PAD = b"p" * 200  # heads of ~260 bytes: thousands of them span many reads


def request(n: int) -> bytes:
    return b"GET /%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n" % (n, PAD)


class Gated:
    """An ASGI app answering each request with its path, once ``gate`` is open."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.started += 1
        await self.gate.wait()
        body = scope["path"].encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(app: Gated, limits: HttpLimits) -> AsyncIterator[tuple[uvicorn.Server, int]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        http=guarded_http_protocol(limits),
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = QuietServer(config)
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started or task.done())
        yield server, port
    finally:
        app.gate.set()
        server.should_exit = True
        await task


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """Error records of the server (uvicorn's "Exception in ASGI application", asyncio's)."""
    caplog.set_level(logging.WARNING)
    yield caplog.records
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def only_connection(server: uvicorn.Server) -> Any:
    [protocol] = server.server_state.connections
    return protocol


def holding(protocol: Any) -> bool:
    """The connection holds bytes it read and may not parse yet."""
    return protocol.gate.held is not None


async def test_a_pipelining_connection_is_parsed_only_so_far_ahead(
    errors: list[logging.LogRecord],
) -> None:
    """2,000 requests in one write (500 KB): while the first is held, eight are parsed and the
    rest waits unread (its bytes held, reading paused); once answers go out, all 2,000 come
    back 200, in order, none refused (the head cap counts each request's own head)."""
    app = Gated()
    limits = HttpLimits(max_per_client=0)
    assert limits.max_pipelined == 8
    async with serving(app, limits) as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(request(n) for n in range(2000)))
        protocol = only_connection(server)
        await wait_until(lambda: protocol.gate.held is not None)
        assert isinstance(protocol.flow, GatedFlow)
        assert protocol.flow.read_paused
        assert protocol._unanswered() == 8
        assert len(protocol.pipeline) == 7
        assert app.started == 1
        app.gate.set()
        expected = b"".join(b"/%d" % n for n in range(2000))
        bodies = []
        for _ in range(2000):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 200 "), head
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            bodies.append(await reader.readexactly(length))
        assert b"".join(bodies) == expected
        assert protocol.gate.held is None
        assert not protocol.flow.read_paused
        writer.close()


async def test_a_client_that_never_reads_is_held_to_its_depth(
    errors: list[logging.LogRecord],
) -> None:
    """A client writing requests as fast as it can and never reading: the server stops reading
    it (the client's writes block), and the parsed requests never pass eight meanwhile."""
    app = Gated()
    app.gate.set()
    async with serving(app, HttpLimits(max_per_client=0)) as (server, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        burst = b"".join(request(n) for n in range(200))
        protocol = only_connection(server)
        deepest = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                while True:  # until the kernel's buffers are full
                    writer.write(burst)
                    await writer.drain()
                    deepest = max(deepest, protocol._unanswered())
        assert protocol.flow.read_paused
        assert protocol._unanswered() <= 8
        assert deepest <= 8
        assert len(protocol.gate.held or b"") <= 1 << 20
        writer.transport.abort()
        await wait_until(lambda: not server.server_state.connections)


async def test_a_cut_connection_frees_its_requests_without_the_cyclic_gc(
    errors: list[logging.LogRecord],
) -> None:
    """A connection cut with a request being answered, seven queued and the rest held: once
    the answer meets the cut, the queued ones never run, no traceback, and the protocol and its
    request cycles are freed by reference counting alone (the cyclic GC off throughout). (A
    connection whose reading is paused learns of its cut at its next write.)"""
    app = Gated()
    gc.disable()
    try:
        async with serving(app, HttpLimits(max_per_client=0)) as (server, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"".join(request(n) for n in range(500)))
            protocol = only_connection(server)
            await wait_until(functools.partial(holding, protocol))
            answering = weakref.ref(protocol.gate.answering)
            queued = [weakref.ref(cycle) for cycle, _ in protocol.pipeline]
            gone = weakref.ref(protocol)
            del protocol
            writer.transport.abort()
            await asyncio.sleep(0.05)
            app.gate.set()
            await wait_until(lambda: not server.server_state.connections)
            await wait_until(lambda: not server.server_state.tasks)
            await asyncio.sleep(0)
            assert app.started == 1
            assert gone() is None
            assert answering() is None
            assert all(ref() is None for ref in queued)
    finally:
        gc.enable()


async def test_a_refusal_behind_pipelined_requests_cuts_them_cleanly(
    errors: list[logging.LogRecord],
) -> None:
    """Requests, then a head over the cap, in one write: the head is refused (431) and the
    requests before it, whose answers would follow the refusal, are cut, without a write
    after the half-close."""
    app = Gated()
    async with serving(app, HttpLimits(max_per_client=0, max_header_bytes=4096)) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        oversized = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % (b"b" * 8192)
        writer.write(request(1) + request(2) + oversized)
        await wait_until(lambda: app.started == 1)
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 431 "), answer
        app.gate.set()
        await asyncio.sleep(0.05)  # the held request's task ends (told it was cut)
        writer.close()
