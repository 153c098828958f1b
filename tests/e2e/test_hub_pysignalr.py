"""A second real client: ``pysignalr`` (negotiate, then the WebSocket with ``id=connectionId``),
with the JSON and the MessagePack hub protocols (it has no other transport than WebSockets), and
what it does when the hub closes the connection at the token's ``exp``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pysignalr.client import SignalRClient
from pysignalr.exceptions import ServerError
from pysignalr.protocol.json import JSONProtocol
from pysignalr.protocol.messagepack import MessagepackProtocol

from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.hub.connections.registry import user_group
from support.hub_wire import SECRET, make_token
from tests.hub_fixtures import push

pytestmark = pytest.mark.e2e


@contextlib.asynccontextmanager
async def receiving(client: SignalRClient, target: str) -> AsyncIterator[asyncio.Queue[Any]]:
    """``client`` running, once opened (within 10 s); yields the queue of the argument lists of
    its ``target`` invocations. Cancelled at the end."""
    opened = asyncio.Event()
    received: asyncio.Queue[list[object]] = asyncio.Queue()

    async def on_open() -> None:
        opened.set()

    async def on_message(arguments: list[object]) -> None:
        await received.put(arguments)

    client.on_open(on_open)
    client.on(target, on_message)
    task = asyncio.create_task(client.run())
    try:
        async with asyncio.timeout(10):
            await opened.wait()
        yield received
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("protocol", ["json", "messagepack"])
async def test_pysignalr_connects_and_receives(hub, protocol):
    user = uuid.uuid4()
    client = SignalRClient(
        f"{hub.http_url}/hubs/messenger",
        protocol=MessagepackProtocol() if protocol == "messagepack" else JSONProtocol(),
        headers={"Authorization": f"Bearer {make_token(user)}"},
    )
    async with receiving(client, "contact_request_received") as received:
        [connection] = hub.hub.connections.values()
        assert connection.protocol.name == protocol
        await push(hub, user_group(user), "contact_request_received", {"fromUserId": "x"})
        async with asyncio.timeout(5):
            assert await received.get() == [{"fromUserId": "x"}]


async def test_pysignalr_sees_expiry_and_starts_again_with_a_fresh_token(hub):
    """pysignalr does not reconnect after a close message with an error (``allowReconnect`` is
    not read): ``run()`` ends with ``ServerError("token expired")``, and the app starts a new
    client with a fresh token, which then receives."""
    user = uuid.uuid4()
    expiring = SignalRClient(
        f"{hub.http_url}/hubs/messenger",
        headers={"Authorization": f"Bearer {mint_token(SECRET, user, ttl=3)}"},
    )
    with pytest.raises(ServerError, match="token expired"):
        async with asyncio.timeout(20):
            await expiring.run()

    client = SignalRClient(
        f"{hub.http_url}/hubs/messenger",
        headers={"Authorization": f"Bearer {mint_token(SECRET, user)}"},
    )
    async with receiving(client, "message_received") as received:
        await push(hub, user_group(user), "message_received", {"seq": 1})
        async with asyncio.timeout(5):
            assert await received.get() == [{"seq": 1}]
