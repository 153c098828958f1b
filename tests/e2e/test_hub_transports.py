"""The official ``@microsoft/signalr`` client (Node) on every transport, forced with
``transport:``, and both hub protocols (``@microsoft/signalr-protocol-msgpack``): each one
receives pushes of every JSON value type, sees live membership (joined, then removed), is
closed by the server with reconnect allowed and reconnects, and stops cleanly."""

from __future__ import annotations

import uuid

import pytest

from realtime_dispatch.hub.connections.registry import chat_group, user_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.wire.protocols import Transport
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import NodeClient, push

pytestmark = pytest.mark.e2e

COMBINATIONS = [
    ("WebSockets", "json"),
    ("WebSockets", "messagepack"),
    ("ServerSentEvents", "json"),  # SSE is text only: MessagePack is not offered there
    ("LongPolling", "json"),
    ("LongPolling", "messagepack"),
]
PAYLOAD = {"s": "héllo", "i": 2**40, "f": 1.5, "b": True, "n": None, "l": [1, "x"], "o": {"k": 1}}


async def _message(client: NodeClient) -> dict:
    event = await client.event()
    assert event["event"] == "message", event
    return event


@pytest.mark.parametrize(("transport", "protocol"), COMBINATIONS)
async def test_official_client_on_each_transport_and_protocol(hub, pool, transport, protocol):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=bob, title="t")
    client = await NodeClient.start(
        f"{hub.http_url}/hubs/messenger",
        make_token(alice),
        targets=["message_received", "marker"],
        transport=transport,
        protocol=protocol,
        reconnect=True,
    )
    try:
        assert (await client.event())["event"] == "started"
        [connection] = hub.hub.connections.values()
        assert connection.transport is Transport(transport)
        assert connection.protocol.name == protocol

        await push(hub, user_group(alice), "message_received", PAYLOAD)
        assert (await _message(client))["args"] == [PAYLOAD]

        # Live membership: joined after connecting, then removed.
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=alice, active=True)
        await push(hub, chat_group(chat), "message_received", {"seq": 1})
        assert (await _message(client))["args"] == [{"seq": 1}]
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=alice, active=False)
        await push(hub, chat_group(chat), "message_received", {"seq": 2})
        await push(hub, user_group(alice), "marker", {"after": 2})
        assert await _message(client) == {
            "event": "message",
            "target": "marker",
            "args": [{"after": 2}],
        }

        # Closed by the server with reconnect allowed: the client comes back by itself.
        connection.close(CloseRequest(CloseReason.SHUTDOWN, "Server is restarting.", True))
        assert (await client.event())["event"] == "reconnecting"
        assert (await client.event())["event"] == "reconnected"
        [again] = hub.hub.connections.values()
        assert again is not connection
        assert (again.transport, again.protocol) == (connection.transport, connection.protocol)
        await push(hub, user_group(alice), "marker", {"after": "reconnect"})
        assert (await _message(client))["args"] == [{"after": "reconnect"}]
    finally:
        await client.stop()
    await wait_until(lambda: not hub.hub.connections, within=10)
