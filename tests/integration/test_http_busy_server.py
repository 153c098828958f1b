"""A busy server does not cut its honest clients as slow ones: requests whose bytes arrived while
the server's loop was stuck wait in its own socket buffer, not on the client. The server is the
guarded protocol under uvicorn on uvloop (as the hub runs), in a thread of its own, so that the
test can stall its loop while clients send."""

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
import uvloop

from realtime_dispatch.edge.http_protocol import HttpLimits, guarded_http_protocol

HEADER_TIMEOUT = 0.3


async def app(scope: dict[str, object], receive: object, send: object) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


class Served:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.ready = threading.Event()

    def stall(self, seconds: float) -> None:
        """Block the server's loop for ``seconds`` inside an I/O callback, as a burst of reads
        would: libuv runs the timers that came due meanwhile before it polls again."""
        assert self.loop is not None
        ours, theirs = socket.socketpair()

        def busy() -> None:
            assert self.loop is not None
            self.loop.remove_reader(ours)
            time.sleep(seconds)
            ours.close()
            theirs.close()

        self.loop.call_soon_threadsafe(self.loop.add_reader, ours, busy)
        time.sleep(0.05)
        theirs.send(b"x")


@pytest.fixture
def served() -> Iterator[Served]:
    state = Served()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        state.port = probe.getsockname()[1]
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host="127.0.0.1",
        port=state.port,
        http=guarded_http_protocol(HttpLimits(header_timeout=HEADER_TIMEOUT, max_per_client=0)),
        lifespan="off",
        log_level="warning",
        backlog=1024,
    )
    server = uvicorn.Server(config)

    async def main() -> None:
        state.loop = asyncio.get_running_loop()
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn's own flag
            await asyncio.sleep(0.01)
        state.ready.set()
        await task

    thread = threading.Thread(target=uvloop.run, args=(main(),), daemon=True)
    thread.start()
    assert state.ready.wait(10)
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(10)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def answer(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_requests_waiting_in_the_servers_backlog_are_answered(served: Served) -> None:
    """A storm in small: 50 clients connect, the server's loop stalls past the header timeout
    while each sends a whole request; every one is answered, none cut (408)."""
    clients = [connect(served.port) for _ in range(50)]
    time.sleep(0.1)  # every connection accepted, its header timer armed
    served.stall(HEADER_TIMEOUT * 3)
    time.sleep(0.05)
    for sock in clients:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answers = [answer(sock) for sock in clients]
    for sock in clients:
        sock.close()
    cut = sum(1 for a in answers if a.startswith(b"HTTP/1.1 408"))
    assert cut == 0, f"{cut} honest clients cut"
    assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers[:3]


def test_a_client_that_sends_nothing_is_still_cut(served: Served) -> None:
    with connect(served.port) as sock:
        started = time.monotonic()
        assert answer(sock).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < HEADER_TIMEOUT + 2


def test_a_client_that_stops_half_way_is_still_cut(served: Served) -> None:
    """Its half request was read long ago: nothing waits on the server, so no grace."""
    with connect(served.port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost")
        assert answer(sock).startswith(b"HTTP/1.1 408")


def test_an_answer_before_the_body_says_close_then_lingers(served: Served) -> None:
    """The app answers before the declared body arrives: the response says ``connection:
    close`` (a keep-alive client must not send its next request on this connection), and the
    server half-closes, discarding what the client still writes instead of resetting it."""
    with connect(served.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n")
        response = b""
        while not response.endswith(b"0\r\n\r\n"):  # the whole (chunked) response
            response += sock.recv(4096)
        assert response.startswith(b"HTTP/1.1 200")
        assert b"\r\nconnection: close\r\n" in response.lower()
        sock.sendall(b"x" * 65536)  # discarded unparsed, no reset
        assert sock.recv(4096) == b""  # the server's FIN (a reset would raise)


def test_a_body_read_with_its_head_keeps_the_connection(served: Served) -> None:
    """Head and body in one write: the response is an ordinary keep-alive one, and a second
    request on the same connection is answered."""
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    with connect(served.port) as sock:
        sock.sendall(request)
        first = b""
        while not first.endswith(b"0\r\n\r\n"):
            first += sock.recv(4096)
        assert b"connection: close" not in first.lower()
        sock.sendall(request.replace(b"Host: x", b"Host: x\r\nConnection: close"))
        assert answer(sock).startswith(b"HTTP/1.1 200")
