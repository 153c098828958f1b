"""The worker's own HTTP transport to a hub (:class:`PostTransport`), against small servers
that answer as a hub, a proxy or a broken peer might: one write per request, kept-alive
connections reused, every way an answer may be delimited, and failures as httpx's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.http_post import PostTransport
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.errors import HubUnavailable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on a free port; yields its URL and the number of connections it accepted."""
    accepted: list[int] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        listening.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    if b"transfer-encoding: chunked" in lines:
        return head, await reader.readuntil(b"0\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:")]
    return head, await reader.readexactly(lengths[0] if lengths else 0)


def answering(*answers: bytes) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
        await reader.read()

    return handle


async def post(url: str, transport: PostTransport, body: bytes = b"{}") -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, transport=transport) as client:
        return await client.post("/api/v1/hubs/messenger/batch?x=1", content=body, timeout=2)


async def test_a_request_is_one_write_and_its_connection_is_kept() -> None:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            seen.append(data)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    async with server(handle) as (url, accepted):
        transport = PostTransport()
        async with httpx.AsyncClient(base_url=url, transport=transport) as client:
            for n in range(3):
                response = await client.post("/p?q=1", content=b"x" * n * 1000)
                assert (response.status_code, response.content) == (200, b"ok")
                await asyncio.sleep(0.05)
    assert len(accepted) == 1
    assert len(seen) == 3  # head and body together, each request in one read
    head, _, body = seen[2].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /p?q=1 HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 2000" in head
    assert b"\r\nAccept-Encoding: identity" in head
    assert body == b"x" * 2000


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\nab\r\n1;x\r\nc\r\n0\r\n\r\n"  # a chunk extension, no trailer
)


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        (b"HTTP/1.1 202 Accepted\r\nContent-Length: 3\r\n\r\nabc", True),
        (CHUNKED, True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc", False),
    ],
)
async def test_every_way_an_answer_is_delimited(answer: bytes, kept: bool) -> None:
    async with server(answering(answer, answer)) as (url, accepted):
        transport = PostTransport()
        async with httpx.AsyncClient(base_url=url, transport=transport) as client:
            for _ in range(2):
                response = await client.post("/p", content=b"{}")
                assert response.content == b"abc"
    assert len(accepted) == (1 if kept else 2)


async def test_an_answer_up_to_the_end_of_the_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\nproxy says no")
        await writer.drain()

    async with server(handle) as (url, _):
        response = await post(url, PostTransport())
    assert (response.status_code, response.content) == (502, b"proxy says no")


async def test_a_connection_the_server_closed_while_idle_is_not_used() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()  # then closed, as a server's keep-alive timeout does

    async with (
        server(handle) as (url, accepted),
        httpx.AsyncClient(base_url=url, transport=PostTransport()) as client,
    ):
        assert (await client.post("/p", content=b"1")).status_code == 200
        await asyncio.sleep(0.1)
        assert (await client.post("/p", content=b"2")).status_code == 200
    assert len(accepted) == 2


async def test_failures_are_httpx_errors_and_the_publisher_reads_them_as_ever() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()

    async with server(silent) as (url, _):
        with pytest.raises(httpx.ReadTimeout):
            async with httpx.AsyncClient(base_url=url, transport=PostTransport()) as client:
                await client.post("/p", content=b"{}", timeout=0.2)
        publisher = HttpHubPublisher(url, "svc", timeout=0.2)
        [result] = await publisher.publish([Push("user:x", "t", {})])
        await publisher.aclose()
        assert isinstance(result, HubUnavailable)
        assert result.code == "Timeout"
    for handler in (garbage, cut):
        async with server(handler) as (url, _):
            with pytest.raises(httpx.ReadError):
                await post(url, PostTransport())
    async with server(silent) as (url, _):
        pass  # closed: nobody listens on that port any more
    with pytest.raises(httpx.ConnectError):
        await post(url, PostTransport())
    publisher = HttpHubPublisher(url, "svc")
    [result] = await publisher.publish([Push("user:x", "t", {})])
    await publisher.aclose()
    assert isinstance(result, HubUnavailable)
    assert result.code == "Unreachable"


async def test_what_it_does_not_send_goes_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GET, and a streamed body, through the default transport; and a publisher in an
    environment with a proxy keeps httpx's own transport (which honours the proxy)."""

    async def stream() -> AsyncIterator[bytes]:
        yield b"{}"

    async with (
        server(answering(*[b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] * 2)) as (
            url,
            _,
        ),
        httpx.AsyncClient(base_url=url, transport=PostTransport()) as client,
    ):
        assert (await client.get("/p")).status_code in (200, 400)
        assert (await client.post("/p", content=stream())).status_code in (200, 400)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    publisher = HttpHubPublisher("http://127.0.0.1:1", "svc")
    try:
        assert not isinstance(publisher._client._transport, PostTransport)
    finally:
        await publisher.aclose()
    monkeypatch.delenv("HTTP_PROXY")
    publisher = HttpHubPublisher("http://127.0.0.1:1", "svc")
    try:
        assert isinstance(publisher._client._transport, PostTransport)
    finally:
        await publisher.aclose()
