"""A storm on a real replica that falls behind: the ``hub`` command in its own process, its
defences at short timeouts, stopped (SIGSTOP) while a few hundred clients send their WebSocket
upgrades and their ``GET /api/sync`` requests on connections it had already accepted, then
resumed past every timer. The bytes of those requests waited in the replica's own socket
buffers, not on the clients: none of them may be cut (408, 503, a close before the answer or
the handshake's). In the same run a client that sends nothing, and one that stops half way
through its request, are still cut (408): the grace is for the server's backlog only."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from websockets.asyncio.client import connect

from support.hub_wire import SECRET, SERVICE_KEY, make_token
from support.procs import cli_env, free_port, start_cli, wait_ready

pytestmark = pytest.mark.e2e

CLIENTS = 200
TIMEOUT = 1.0  # the replica's header and body timeouts
STALL = 3 * TIMEOUT  # the replica stopped this long, with every client's timer armed
HANDSHAKE = b'{"protocol":"json","version":1}\x1e'


@contextlib.asynccontextmanager
async def replica(database_url: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
        REALTIME_HTTP_HEADER_TIMEOUT=str(TIMEOUT),
        REALTIME_HTTP_BODY_TIMEOUT=str(TIMEOUT),
        REALTIME_LOG_LEVEL="warning",
    )
    process = await start_cli("hub", "--port", str(port), env=env)
    # Read what the replica writes, so that a full pipe never stalls it.
    drains = [asyncio.create_task(s.read()) for s in (process.stdout, process.stderr) if s]
    try:
        await wait_ready(process, f"http://127.0.0.1:{port}", within=60)
        yield process, port
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.gather(*drains)


async def connected(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def websocket_client(sock: socket.socket, port: int) -> str:
    """Upgrade and SignalR handshake on ``sock``: ``ok``, or how the client was cut."""
    token = make_token(uuid.uuid4())
    try:
        async with connect(
            f"ws://127.0.0.1:{port}/hubs/messenger",
            sock=sock,
            additional_headers={"Authorization": f"Bearer {token}"},
            open_timeout=30,
            ping_interval=None,
        ) as ws:
            await ws.send(HANDSHAKE.decode())
            async with asyncio.timeout(30):
                answer = await ws.recv()
            return "ok" if answer == "{}\x1e" else f"handshake {answer!r}"
    except Exception as exc:  # how it was cut is what the test counts
        return f"ws {type(exc).__name__}: {exc}"[:80]


async def sync_client(sock: socket.socket) -> str:
    """``GET /api/sync`` on ``sock``: ``ok`` (200), or what it got instead."""
    loop = asyncio.get_running_loop()
    token = make_token(uuid.uuid4())
    request = (
        "GET /api/sync?limit=10 HTTP/1.1\r\nHost: replica\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    try:
        await loop.sock_sendall(sock, request.encode())
        answer = b""
        async with asyncio.timeout(30):
            while chunk := await loop.sock_recv(sock, 65536):
                answer += chunk
    except (OSError, TimeoutError) as exc:
        return f"sync {type(exc).__name__}"
    finally:
        sock.close()
    status = answer.split(b"\r\n", 1)[0]
    return "ok" if status == b"HTTP/1.1 200 OK" else f"sync {status.decode(errors='replace')}"


async def silent_client(sock: socket.socket, send: bytes) -> bytes:
    """Sends ``send`` (nothing, or half a request) and waits for what the replica answers."""
    loop = asyncio.get_running_loop()
    try:
        if send:
            await loop.sock_sendall(sock, send)
        answer = b""
        async with asyncio.timeout(30):
            while chunk := await loop.sock_recv(sock, 65536):
                answer += chunk
        return answer
    finally:
        sock.close()


async def test_a_stalled_replica_cuts_no_honest_client(database_url: str) -> None:
    async with replica(database_url) as (process, port):
        ws_socks = [await connected(port) for _ in range(CLIENTS)]
        sync_socks = [await connected(port) for _ in range(CLIENTS)]
        silent, half = await connected(port), await connected(port)
        await asyncio.sleep(0.5)  # accepted: every connection's header timer is armed
        process.send_signal(signal.SIGSTOP)
        try:
            clients = [
                *(asyncio.create_task(websocket_client(s, port)) for s in ws_socks),
                *(asyncio.create_task(sync_client(s)) for s in sync_socks),
            ]
            cut_silent = asyncio.create_task(silent_client(silent, b""))
            cut_half = asyncio.create_task(silent_client(half, b"GET /api/sync HTTP/1.1\r\nHo"))
            await asyncio.sleep(STALL)  # every request is in the replica's socket buffers
        finally:
            process.send_signal(signal.SIGCONT)
        outcomes = Counter(await asyncio.gather(*clients))
        cut = CLIENTS * 2 - outcomes["ok"]
        assert cut == 0, f"{cut} honest clients cut: {dict(outcomes)}"
        assert (await cut_silent).startswith(b"HTTP/1.1 408")
        assert (await cut_half).startswith(b"HTTP/1.1 408")


async def handshakes_failed(port: int) -> float:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith('messenger_realtime_hub_disconnects_total{reason="handshake_failed"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_upgrades_whose_clients_gave_up_are_not_opened(database_url: str) -> None:
    """Clients that send their upgrade while the replica is stalled and leave before it reads
    it: the replica drops those connections unopened (an opening for each would only fail its
    handshake), and a client that stayed is still served."""
    async with replica(database_url) as (process, port):
        before = await handshakes_failed(port)
        gone = [await connected(port) for _ in range(50)]
        stayed = await connected(port)
        await asyncio.sleep(0.5)
        process.send_signal(signal.SIGSTOP)
        try:
            token = make_token(uuid.uuid4())
            upgrade = (
                "GET /hubs/messenger HTTP/1.1\r\nHost: replica\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
            ).encode()
            for sock in gone:
                sock.setblocking(True)
                sock.sendall(upgrade)
                sock.close()
            served = asyncio.create_task(websocket_client(stayed, port))
            await asyncio.sleep(0.5)
        finally:
            process.send_signal(signal.SIGCONT)
        assert await served == "ok"
        assert await handshakes_failed(port) == before
