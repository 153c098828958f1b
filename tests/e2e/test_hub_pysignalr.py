"""A second real client: ``pysignalr`` (negotiate, then the WebSocket with ``id=connectionId``),
with the JSON and the MessagePack hub protocols (it has no other transport than WebSockets)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from pysignalr.client import SignalRClient
from pysignalr.protocol.json import JSONProtocol
from pysignalr.protocol.messagepack import MessagepackProtocol

from realtime_dispatch.hub.registry import user_group
from tests.hub_fixtures import hub_settings, make_token, push, running_hub

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("protocol", ["json", "messagepack"])
async def test_pysignalr_connects_and_receives(database_url, pool, protocol):
    user = uuid.uuid4()
    async with running_hub(hub_settings(), dsn=database_url, pool=pool) as hub:
        client = SignalRClient(
            f"{hub.http_url}/hubs/messenger",
            protocol=MessagepackProtocol() if protocol == "messagepack" else JSONProtocol(),
            headers={"Authorization": f"Bearer {make_token(user)}"},
        )
        opened = asyncio.Event()
        received: asyncio.Queue[list[object]] = asyncio.Queue()

        async def on_open() -> None:
            opened.set()

        async def on_message(arguments: list[object]) -> None:
            await received.put(arguments)

        client.on_open(on_open)
        client.on("contact_request_received", on_message)
        task = asyncio.create_task(client.run())
        try:
            async with asyncio.timeout(10):
                await opened.wait()
            [connection] = hub.hub.connections.values()
            assert connection.protocol.name == protocol
            await push(hub, user_group(user), "contact_request_received", {"fromUserId": "x"})
            async with asyncio.timeout(5):
                assert await received.get() == [{"fromUserId": "x"}]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
