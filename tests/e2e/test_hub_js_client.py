"""The official ``@microsoft/signalr`` client (Node) against a real hub: connect, receive, bad
token refused, invocation of an unknown method, and a transport drop survived by stateful
reconnect without losing a message (JSON and MessagePack). The other transports:
``test_hub_transports.py``."""

from __future__ import annotations

import uuid

import pytest

from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from tests.hub_fixtures import (
    NODE_TRANSPORTS,
    NodeClient,
    TcpProxy,
    create_shared_chat,
    push,
)
from tests.integration.chat_pairs import alice_bob_and_a_chat

pytestmark = pytest.mark.e2e


async def test_connects_receives_and_gets_unknown_method_error(hub, pool):
    alice = uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t")
    client = await NodeClient.start(
        f"{hub.http_url}/hubs/messenger", make_token(alice), targets=["message_received"]
    )
    try:
        started = await client.event()
        assert started["event"] == "started"
        await push(hub, chat_group(chat), "message_received", {"chatId": str(chat), "seq": 1})
        assert await client.event() == {
            "event": "message",
            "target": "message_received",
            "args": [{"chatId": str(chat), "seq": 1}],
        }
        await client.send({"invoke": "NoSuchMethod", "args": [1]})
        failed = await client.event()
        assert failed["event"] == "invoke_failed"
        assert "NoSuchMethod" in failed["error"]
    finally:
        await client.stop()


async def test_bad_token_is_refused(hub):
    forged = make_token(uuid.uuid4(), secret="some-other-secret-of-at-least-32-bytes")
    client = await NodeClient.start(f"{hub.http_url}/hubs/messenger", forged)
    try:
        event = await client.event()
        assert event["event"] == "start_failed"
        assert event["statusCode"] == 401 or "401" in event["error"]
    finally:
        await client.stop()
    assert not hub.hub.connections


@pytest.mark.parametrize("protocol", ["json", "messagepack"])
async def test_stateful_reconnect_survives_transport_drop(hub, pool, protocol):
    alice = uuid.uuid4()
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t")
    group = chat_group(chat)
    async with TcpProxy(hub.port) as proxy:
        client = await NodeClient.start(
            f"http://127.0.0.1:{proxy.port}/hubs/messenger",
            make_token(alice),
            stateful=True,
            targets=["message_received"],
            protocol=protocol,
        )
        try:
            assert (await client.event())["event"] == "started"
            [connection] = hub.hub.connections.values()
            assert connection.stateful
            assert connection.protocol.name == protocol
            await push(hub, group, "message_received", {"seq": 1})
            assert (await client.event())["args"] == [{"seq": 1}]
            await push(hub, group, "message_received", {"seq": 2})
            proxy.cut()  # seq 2 may or may not have reached the client
            from support.procs import wait_until

            await wait_until(lambda: connection.attachment is None, within=5)
            for seq in (3, 4, 5):  # sent while the client has no transport
                await push(hub, group, "message_received", {"seq": seq})
            proxy.release()
            seqs = []
            while len(seqs) < 4:
                event = await client.event()
                assert event["event"] == "message", event
                seqs.append(event["args"][0]["seq"])
            assert seqs == [2, 3, 4, 5]
            # Same connection (no new negotiate, no reconnecting event), and it still works.
            assert list(hub.hub.connections.values()) == [connection]
            assert connection.attachment is not None
            async with pool.acquire() as conn:
                await set_participant(conn, chat_id=chat, user_id=alice, active=True)
            await push(hub, group, "message_received", {"seq": 6})
            assert (await client.event())["args"] == [{"seq": 6}]
        finally:
            await client.stop()


@pytest.mark.parametrize(("transport", "protocol"), NODE_TRANSPORTS)
async def test_typing_with_the_official_client(hub, pool, transport, protocol):
    """``connection.invoke("Typing", chatId)`` completes; the other member gets ``user_typing``
    on the same transport and protocol; a chat the caller is not in fails the invocation."""
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    url = f"{hub.http_url}/hubs/messenger"
    options = {"transport": transport, "protocol": protocol}
    typist = await NodeClient.start(url, make_token(alice), **options)
    watcher = await NodeClient.start(url, make_token(bob), targets=["user_typing"], **options)
    try:
        assert (await typist.event())["event"] == "started"
        assert (await watcher.event())["event"] == "started"
        await typist.send({"invoke": "Typing", "args": [str(chat)]})
        assert await typist.event() == {"event": "invoked"}  # void: result undefined
        received = await watcher.event()
        assert received["target"] == "user_typing"
        [payload] = received["args"]
        assert payload["chatId"] == str(chat)
        assert payload["userId"] == str(alice)
        await typist.send({"invoke": "Typing", "args": [str(uuid.uuid4())]})
        failed = await typist.event()
        assert failed["event"] == "invoke_failed"
        assert "not a member" in failed["error"]
    finally:
        await typist.stop()
        await watcher.stop()


@pytest.mark.parametrize(("transport", "protocol"), NODE_TRANSPORTS)
async def test_presence_with_the_official_client(pool, start_hub, transport, protocol):
    """``connection.invoke("WatchPresence", [ids])`` answers the states of the people the
    caller shares a chat with; ``presence_changed`` follows one online and, after the grace,
    offline; ``UnwatchPresence`` completes; a list past the limit fails the invocation."""
    alice, bob, stranger = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=alice, title="t", members=[bob])
    async with start_hub(presence_grace=0.2, presence_watch_limit=10) as hub:
        url = f"{hub.http_url}/hubs/messenger"
        config = {"transport": transport, "protocol": protocol}
        watcher = await NodeClient.start(
            url, make_token(alice), targets=["presence_changed"], **config
        )
        try:
            assert (await watcher.event())["event"] == "started"
            await watcher.send({"invoke": "WatchPresence", "args": [[str(bob), str(stranger)]]})
            answer = await watcher.event()
            assert answer == {
                "event": "invoked",
                "result": [{"userId": str(bob), "online": False, "lastSeenAt": None}],
            }
            other = await NodeClient.start(url, make_token(bob), **config)
            assert (await other.event())["event"] == "started"
            online = await watcher.event()
            assert online["target"] == "presence_changed"
            assert online["args"] == [{"userId": str(bob), "online": True, "lastSeenAt": None}]
            await other.stop()
            offline = await watcher.event()
            assert offline["args"][0]["online"] is False
            assert offline["args"][0]["lastSeenAt"].endswith("Z")
            await watcher.send({"invoke": "UnwatchPresence", "args": [[str(bob)]]})
            assert await watcher.event() == {"event": "invoked"}
            too_many = [str(uuid.uuid4()) for _ in range(11)]
            await watcher.send({"invoke": "WatchPresence", "args": [too_many]})
            failed = await watcher.event()
            assert failed["event"] == "invoke_failed"
            assert "at most 10" in failed["error"]
        finally:
            await watcher.stop()


async def test_the_typescript_sdk_watches_again_after_a_reconnect(pool, start_hub):
    """Watches belong to a connection: the hub drops the TypeScript SDK's, the official client
    reconnects, and the SDK watches Bob again on its own (the answer reaches the
    ``presence_changed`` handlers), so Bob coming online reaches Alice without a new watch."""
    from tests.e2e.test_own_schema_resume import build_sdk, sdk_client

    build_sdk()  # clients/js/dist, which the driver imports (a fresh clone has none)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        await create_shared_chat(conn, creator=alice, title="t", members=[bob])
    async with start_hub(presence_grace=0.2) as hub:
        watcher = await sdk_client(hub.http_url, alice, "WebSockets", ["presence_changed"])
        other = None
        try:
            assert (await _next(watcher, "started"))["transport"] == "WebSocketTransport"
            await watcher.send({"watch": [str(bob)]})
            states = (await _next(watcher, "watched"))["states"]
            assert states == [{"userId": str(bob), "online": False, "lastSeenAt": None}]
            [connection] = hub.hub.connections.values()
            connection.close(CloseRequest(CloseReason.TRANSPORT_LOST, "dropped by the test", True))
            again = await _next(watcher, "message")  # the re-watch's answer, as an event
            assert again["target"] == "presence_changed"
            assert again["args"] == [{"userId": str(bob), "online": False, "lastSeenAt": None}]
            [reconnected] = hub.hub.connections.values()
            assert reconnected is not connection
            other = await NodeClient.start(f"{hub.http_url}/hubs/messenger", make_token(bob))
            assert (await other.event())["event"] == "started"
            online = await _next(watcher, "message")
            assert online["target"] == "presence_changed"
            assert online["args"] == [{"userId": str(bob), "online": True, "lastSeenAt": None}]
        finally:
            if other is not None:
                await other.stop()
            await watcher.stop()


async def _next(client: NodeClient, kind: str) -> dict[str, object]:
    while True:
        event = await client.event(within=30)
        if event["event"] == kind:
            return event
        assert event["event"] in {"resync", "resumed", "started", "message"}, event
