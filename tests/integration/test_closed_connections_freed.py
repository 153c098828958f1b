"""A closed connection's objects are freed within seconds (docs/RELIABILITY.md, H29): WebSocket,
SSE and pipelined HTTP connections cut mid-work (an abort, no goodbye) against a real hub whose
connection ends drive a :class:`GarbageSweep`, the automatic cyclic GC off (the servers' tuning
makes it rare): once the hub has seen them go and the sweep has run, nothing of them is left but
what the hub keeps of an ended SSE or long-polling connection for 30 s by design (its state and
hub connection, to answer its late requests). A long-polling connection whose poll is cut ends
later, at its idle timeout: its objects go at the sweep after the next connection's end."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import uuid
from collections.abc import AsyncIterator

import httpx
from websockets.asyncio.client import connect

from realtime_dispatch.edge.gc_sweep import GarbageSweep
from realtime_dispatch.hub.connections.connection import HubConnection
from realtime_dispatch.hub.transports.http_connections import HttpConnectionState
from realtime_dispatch.hub.transports.ws_direct import DirectWebSocket
from support.hub_wire import RS, make_token
from support.procs import wait_until
from tests.hub_fixtures import RunningHub, hub_settings, running_hub

HUB = "/hubs/messenger"
HANDSHAKE = b'{"protocol":"json","version":1}' + RS.encode()
EACH = 15


def alive() -> int:
    kinds = (HubConnection, HttpConnectionState, DirectWebSocket)
    return sum(isinstance(o, kinds) for o in gc.get_objects())


async def websocket(running: RunningHub, token: str) -> None:
    async with connect(f"{running.ws_url}?access_token={token}", ping_interval=None) as ws:
        await ws.send(HANDSHAKE.decode())
        await ws.recv()
        ws.transport.abort()


async def raw(running: RunningHub, request: bytes, until: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    writer.write(request)
    await reader.readuntil(until)
    writer.transport.abort()


async def sse(running: RunningHub, http: httpx.AsyncClient, token: str) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    negotiated = await http.post(f"{HUB}/negotiate?negotiateVersion=1", headers=auth)
    connection = negotiated.json()["connectionToken"]
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    writer.write(
        b"GET %s?id=%s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
        b"Authorization: Bearer %s\r\n\r\n" % (HUB.encode(), connection.encode(), token.encode())
    )
    await reader.readuntil(b"\r\n\r\n")
    await http.post(f"{HUB}?id={connection}", content=HANDSHAKE, headers=auth)
    await reader.readuntil(RS.encode())
    writer.transport.abort()


@contextlib.asynccontextmanager
async def sweeping(sweep: GarbageSweep) -> AsyncIterator[None]:
    gc.collect()
    gc.disable()
    task = asyncio.create_task(sweep.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.enable()


async def test_connections_cut_mid_work_leave_nothing_after_the_sweep(database_url, pool) -> None:
    # Unpaced: a full collection of this test process (the whole suite's objects) can take a
    # loaded machine long enough that the 1 % pacing would put the next sweep 30 s off; the
    # pacing has tests of its own (tests/unit/test_gc_sweep.py).
    sweep = GarbageSweep(delay=0.3, max_cpu_share=1.0)
    async with (
        sweeping(sweep),
        running_hub(hub_settings(), dsn=database_url, pool=pool, ended=sweep.ended) as running,
    ):
        baseline = alive()
        tokens = [make_token(uuid.uuid4()) for _ in range(EACH)]
        async with httpx.AsyncClient(base_url=running.http_url, timeout=10) as http:
            for token in tokens:
                await websocket(running, token)
                await sse(running, http, token)
                await raw(running, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 50, b"\r\n\r\n")
        await wait_until(lambda: not running.hub.connections)
        ends = sweep.sweeps
        await wait_until(lambda: sweep.sweeps > ends and sweep.ends == 0)
        assert sweep.sweeps >= 1
        kept = len(running.hub.http_transports)  # ended SSE streams answer 404 for 30 s more
        assert alive() <= baseline + 2 * kept  # those states and their hub connections
        assert not [o for o in gc.get_objects() if isinstance(o, DirectWebSocket)]
