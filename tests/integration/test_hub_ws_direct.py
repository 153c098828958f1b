"""The hub's WebSockets served directly on the transport (``hub.ws_direct``): no task while a
connection is open, and the WebSocket protocol's corners (fragments, pings, close frames,
bad upgrades) handled as uvicorn's WebSocket protocol handles them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime_dispatch.hub.connections.registry import user_group
from realtime_dispatch.hub.transports.ws_direct import DirectWebSocket
from support.hub_wire import RS, make_token
from support.procs import wait_until
from tests.hub_fixtures import raw_client


def record(n: int) -> bytes:
    return f'{{"type":1,"target":"t","arguments":[{n}]}}{RS}'.encode()


async def test_open_connections_run_no_task(hub):
    """Twenty open connections, each admitted and receiving: no task of theirs is left."""
    users = [uuid.uuid4() for _ in range(20)]
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(raw_client(hub, make_token(u))) for u in users]
        await wait_until(lambda: len(hub.hub.connections) == 20)
        await asyncio.sleep(0.1)  # the openings' tasks end once admitted
        assert [t for t in asyncio.all_tasks() if t.get_name().startswith("hub-")] == []
        for connection in hub.hub.connections.values():
            assert connection.attachment is not None
            assert connection.attachment.reader is None
            assert connection.attachment.writer is None
        items = [(user_group(u), record(i)) for i, u in enumerate(users)]
        assert hub.hub.send_to_groups(items) == 20
        for i, c in enumerate(clients):
            assert (await asyncio.wait_for(c.next_of([1]), 5))["arguments"] == [i]


async def test_fragmented_message_is_one_message(hub):
    """A hub record sent as a WebSocket message in three fragments gets its one answer."""
    async with raw_client(hub, make_token(uuid.uuid4())) as c:
        invocation = f'{{"type":1,"invocationId":"7","target":"nope","arguments":[]}}{RS}'
        await c.ws.send([invocation[:10], invocation[10:30], invocation[30:]])
        answer = await asyncio.wait_for(c.next_of([3]), 5)
        assert answer["invocationId"] == "7"
        assert "nope" in answer["error"]


async def test_websocket_ping_gets_a_pong(hub):
    async with raw_client(hub, make_token(uuid.uuid4())) as c:
        waiter = await c.ws.ping(b"are you there")
        latency = await asyncio.wait_for(waiter, 5)
        assert latency >= 0


async def test_client_close_frame_ends_the_connection(hub):
    async with raw_client(hub, make_token(uuid.uuid4())) as c:
        await wait_until(lambda: len(hub.hub.connections) == 1)
        await c.ws.close(1000)
        assert c.ws.close_code == 1000  # the hub answered the close handshake
    await wait_until(lambda: not hub.hub.connections)
    registry = hub.hub.metrics_registry
    closed = registry.get_sample_value(
        "messenger_realtime_hub_disconnects_total", {"reason": "client_close"}
    )
    assert closed == 1


async def test_dropped_socket_ends_the_connection(hub):
    """A client that vanishes (no close frame) ends as transport_lost, and its socket is gone
    from the server's connections, so shutdown does not wait for it."""
    async with raw_client(hub, make_token(uuid.uuid4())) as c:
        await wait_until(lambda: len(hub.hub.connections) == 1)
        c.ws.transport.abort()
    await wait_until(lambda: not hub.hub.connections)
    sockets = [p for p in hub.server.server_state.connections if isinstance(p, DirectWebSocket)]
    assert sockets == []
    lost = hub.hub.metrics_registry.get_sample_value(
        "messenger_realtime_hub_disconnects_total", {"reason": "transport_lost"}
    )
    assert lost == 1


async def test_invalid_upgrade_gets_an_http_error(hub):
    """A WebSocket upgrade without a key is refused with 400 by the WebSocket handshake, before
    any token is looked at."""
    request = (
        b"GET /hubs/messenger HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", hub.port)
    try:
        writer.write(request)
        answer = await asyncio.wait_for(reader.read(4096), 5)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 400")


async def test_unmasked_frame_fails_the_connection(hub):
    """A client frame without a mask breaks RFC 6455: the hub closes with 1002."""
    async with raw_client(hub, make_token(uuid.uuid4())) as c:
        await wait_until(lambda: len(hub.hub.connections) == 1)
        sock = c.ws.transport.get_extra_info("socket")
        raw = socket.socket(fileno=sock.fileno())  # write past the client's framing
        try:
            raw.send(b"\x81\x05hello")
        finally:
            raw.detach()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(c.ws.recv(), 5)
        assert c.ws.close_code == 1002
    await wait_until(lambda: not hub.hub.connections)


async def test_records_sent_while_being_admitted_are_answered_in_order(hub):
    """The handshake and two invocations in one message: the invocations wait while the
    connection is admitted, then get their answers in order."""
    token = make_token(uuid.uuid4())
    url = hub.ws_url
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        invocations = "".join(
            f'{{"type":1,"invocationId":"{n}","target":"x","arguments":[]}}{RS}' for n in (1, 2)
        )
        await ws.send('{"protocol":"json","version":1}' + RS + invocations)
        got = []
        async with asyncio.timeout(5):
            while len(got) < 3:
                frame = await ws.recv()
                got += [r for r in str(frame).split(RS) if r]
        assert got[0] == "{}"
        assert [r.split('"invocationId":"')[1][0] for r in got[1:]] == ["1", "2"]
