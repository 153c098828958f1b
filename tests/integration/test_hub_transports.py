"""Server-Sent Events, long polling and the MessagePack protocol on the wire, against a real hub:
status codes, the handshake over ``POST``, close messages, ``DELETE``, tokens from another
replica, the slow-consumer policy, and a group of JSON and MessagePack members."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import ormsgpack
import pytest
from websockets.asyncio.client import connect

from realtime_dispatch.auth import revocation_store
from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.hub.connections import fanout
from realtime_dispatch.hub.connections.registry import user_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.wire.messagepack import BinaryRecordBuffer, length_prefixed
from realtime_dispatch.hub.wire.protocols import Transport
from support.hub_wire import RS, SECRET, make_token
from support.procs import wait_until
from tests.hub_fixtures import RunningHub, hub_settings, negotiate, push, running_hub

HUB = "/hubs/messenger"
JSON_HANDSHAKE = b'{"protocol":"json","version":1}\x1e'
MSGPACK_HANDSHAKE = b'{"protocol":"messagepack","version":1}\x1e'


def _records(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(r) for r in body.split(RS.encode()) if r]


def _msgpack(body: bytes) -> list[list[Any]]:
    return [ormsgpack.unpackb(r) for r in BinaryRecordBuffer(1 << 20).feed(body)]


class LongPoller:
    """A long-polling client on httpx: negotiate, open, handshake, poll."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.http = http
        self.auth = {"Authorization": f"Bearer {token}"}
        self.id = ""

    async def open(
        self, running: RunningHub, token: str, handshake: bytes, *, version: int = 1
    ) -> bytes:
        negotiated = (await negotiate(running, token, version=version)).json()
        self.id = negotiated["connectionToken" if version else "connectionId"]
        first = await self.get()
        assert (first.status_code, first.content) == (200, b"")  # opens, answers at once
        assert (await self.post(handshake)).status_code == 200
        return (await self.get()).content

    async def get(self, **headers: str) -> httpx.Response:
        return await self.http.get(HUB, params={"id": self.id}, headers={**self.auth, **headers})

    async def post(self, body: bytes) -> httpx.Response:
        return await self.http.post(HUB, params={"id": self.id}, content=body, headers=self.auth)

    async def delete(self) -> httpx.Response:
        return await self.http.delete(HUB, params={"id": self.id}, headers=self.auth)


@contextlib.asynccontextmanager
async def http_client(running: RunningHub) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.http_url, timeout=30) as http:
        yield http


@contextlib.asynccontextmanager
async def long_poller(running: RunningHub) -> AsyncIterator[tuple[uuid.UUID, str, LongPoller]]:
    """A new user, their token and their long-polling client (not opened yet) on ``running``."""
    user = uuid.uuid4()
    token = make_token(user)
    async with http_client(running) as http:
        yield user, token, LongPoller(http, token)


async def test_long_polling_json(hub):
    async with long_poller(hub) as (user, token, client):
        assert _records(await client.open(hub, token, JSON_HANDSHAKE)) == [{}]
        [connection] = hub.hub.connections.values()
        assert connection.transport is Transport.LONG_POLLING

        # A poll waits for the push; both pushes made meanwhile come in one answer.
        waiting = asyncio.create_task(client.get())
        await push(hub, user_group(user), "t", {"n": 1})
        await push(hub, user_group(user), "t", {"n": 2})
        first = await waiting
        assert first.headers["content-type"].startswith("text/plain")
        received = _records(first.content)
        if len(received) == 1:
            received += _records((await client.get()).content)
        assert [r["arguments"] for r in received] == [[{"n": 1}], [{"n": 2}]]

        # An invocation comes back as a completion with the error, on the next poll.
        call = b'{"type":1,"invocationId":"7","target":"Nope","arguments":[]}\x1e'
        assert (await client.post(call)).status_code == 200
        [completion] = _records((await client.get()).content)
        assert completion == {"type": 3, "invocationId": "7", "error": "Unknown hub method 'Nope'."}

        # close(): the close record, then 204.
        connection.close(CloseRequest(CloseReason.SHUTDOWN, "bye", allow_reconnect=True))
        closing = await client.get()
        assert _records(closing.content) == [{"type": 7, "error": "bye", "allowReconnect": True}]
        assert (await client.get()).status_code == 204
        assert not hub.hub.connections
        assert (await client.post(call)).status_code == 404


async def test_long_polling_after_negotiate_version_0(hub):
    """Version 0 has no connection token: its clients send the connection id as ``id``."""
    async with long_poller(hub) as (user, token, client):
        assert _records(await client.open(hub, token, JSON_HANDSHAKE, version=0)) == [{}]
        await push(hub, user_group(user), "t", {"n": 1})
        assert _records((await client.get()).content)[0]["arguments"] == [{"n": 1}]
        assert (await client.delete()).status_code == 202


async def test_long_polling_delete_ends_the_waiting_poll(hub):
    async with long_poller(hub) as (_user, token, client):
        await client.open(hub, token, JSON_HANDSHAKE)
        waiting = asyncio.create_task(client.get())
        await wait_until(lambda: hub.hub.connections, within=5)
        assert (await client.delete()).status_code == 202
        assert (await waiting).status_code == 204
        await wait_until(lambda: not hub.hub.connections, within=5)
    value = hub.hub.metrics_registry.get_sample_value(
        "messenger_realtime_hub_disconnects_total", {"reason": "client_close"}
    )
    assert value == 1


async def test_unknown_token_other_user_and_no_token(hub):
    alice, bob = uuid.uuid4(), uuid.uuid4()
    async with http_client(hub) as http:
        auth = {"Authorization": f"Bearer {make_token(alice)}"}
        # A token this replica never negotiated (another replica's): a clear 404, each method.
        for method in ("GET", "POST", "DELETE"):
            response = await http.request(method, HUB, params={"id": "elsewhere"}, headers=auth)
            assert response.status_code == 404, method
            assert "another replica" in response.text
        sse = await http.get(
            HUB, params={"id": "elsewhere"}, headers={**auth, "Accept": "text/event-stream"}
        )
        assert sse.status_code == 404
        client = LongPoller(http, make_token(alice))
        await client.open(hub, make_token(alice), JSON_HANDSHAKE)
        bob_auth = {"Authorization": f"Bearer {make_token(bob)}"}
        assert (await http.get(HUB, params={"id": client.id}, headers=bob_auth)).status_code == 403
        assert (await http.post(HUB, params={"id": client.id}, content=b"")).status_code == 401
        assert (await http.get(HUB, headers=auth)).status_code == 400
        assert (await client.delete()).status_code == 202


async def test_long_polling_messagepack(hub):
    async with long_poller(hub) as (user, token, client):
        assert await client.open(hub, token, MSGPACK_HANDSHAKE) == b"{}\x1e"
        await push(hub, user_group(user), "t", {"n": 1, "s": "é"})
        polled = await client.get()
        assert polled.headers["content-type"] == "application/octet-stream"
        assert _msgpack(polled.content) == [[1, {}, None, "t", [{"n": 1, "s": "é"}], []]]
        # The client's MessagePack ping and an invocation, in one POST.
        body = length_prefixed(ormsgpack.packb([6])) + length_prefixed(
            ormsgpack.packb([1, {}, "9", "Nope", [], []])
        )
        assert (await client.post(body)).status_code == 200
        [completion] = _msgpack((await client.get()).content)
        assert completion == [3, {}, "9", 1, "Unknown hub method 'Nope'."]
        [connection] = hub.hub.connections.values()
        connection.close(CloseRequest(CloseReason.SHUTDOWN, "bye", allow_reconnect=True))
        assert _msgpack((await client.get()).content) == [[7, "bye", True]]
        assert (await client.get()).status_code == 204


async def _sse_events(response: httpx.Response) -> AsyncIterator[bytes]:
    """The data of each event of a Server-Sent Events stream."""
    data: list[bytes] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data.append(line[6:].encode())
        elif line == "" and data:
            yield b"\n".join(data)
            data = []


async def test_server_sent_events(hub):
    user = uuid.uuid4()
    token = make_token(user)
    async with http_client(hub) as http:
        connection_token = (await negotiate(hub, token)).json()["connectionToken"]
        params = {"id": connection_token, "access_token": token}  # as a browser's EventSource
        headers = {"Accept": "text/event-stream"}
        async with http.stream("GET", HUB, params=params, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = _sse_events(stream)
            auth = {"Authorization": f"Bearer {token}"}
            post = await http.post(
                HUB, params={"id": connection_token}, content=JSON_HANDSHAKE, headers=auth
            )
            assert post.status_code == 200
            assert _records(await anext(events)) == [{}]
            [connection] = hub.hub.connections.values()
            assert connection.transport is Transport.SERVER_SENT_EVENTS
            await push(hub, user_group(user), "t", {"text": "two\nlines"})
            [record] = _records(await anext(events))
            assert record["arguments"] == [{"text": "two\nlines"}]
            connection.close(CloseRequest(CloseReason.SHUTDOWN, "bye", allow_reconnect=True))
            assert _records(await anext(events)) == [
                {"type": 7, "error": "bye", "allowReconnect": True}
            ]
            with pytest.raises(StopAsyncIteration):  # the stream ends after the close message
                await anext(events)
        assert not hub.hub.connections


async def test_messagepack_over_server_sent_events_is_refused(hub):
    user = uuid.uuid4()
    token = make_token(user)
    async with http_client(hub) as http:
        connection_token = (await negotiate(hub, token)).json()["connectionToken"]
        params = {"id": connection_token, "access_token": token}
        headers = {"Accept": "text/event-stream"}
        async with http.stream("GET", HUB, params=params, headers=headers) as stream:
            events = _sse_events(stream)
            await http.post(HUB, params=params, content=MSGPACK_HANDSHAKE)
            [reply] = _records(await anext(events))
            assert "Binary" in reply["error"]
            with pytest.raises(StopAsyncIteration):
                await anext(events)
    assert not hub.hub.connections


async def test_long_polling_slow_consumer_is_closed(pool, start_hub):
    """A long-polling client that stops polling is closed like a WebSocket that stops reading."""
    async with start_hub(limits={"max_pending": 20, "close_grace": 5}) as running:
        async with long_poller(running) as (user, token, client):
            await client.open(running, token, JSON_HANDSHAKE)
            for n in range(25):
                await push(running, user_group(user), "t", {"n": n})
            [connection] = running.hub.connections.values()
            assert connection.closing is not None
            assert connection.closing.reason is CloseReason.SLOW_CONSUMER
            [close] = _records((await client.get()).content)
            assert close["type"] == 7
            assert close["allowReconnect"] is True
            assert (await client.get()).status_code == 204
        value = running.hub.metrics_registry.get_sample_value(
            "messenger_realtime_hub_disconnects_total", {"reason": "slow_consumer"}
        )
        assert value == 1


async def test_long_polling_slow_consumer_gets_its_close_message_after_the_grace(pool, start_hub):
    """H12: the client polls again only well after the close grace: its close message still
    comes before the 204 (it used to be dropped when no poll came within the grace)."""
    async with (
        start_hub(limits={"max_pending": 20, "close_grace": 0.2}) as running,
        long_poller(running) as (user, token, client),
    ):
        await client.open(running, token, JSON_HANDSHAKE)
        for n in range(25):
            await push(running, user_group(user), "t", {"n": n})
        await wait_until(lambda: not running.hub.connections, within=5)
        await asyncio.sleep(1.0)  # five close graces
        [close] = _records((await client.get()).content)
        assert close["type"] == 7
        assert "not reading fast enough" in close["error"]
        assert (await client.get()).status_code == 204


async def test_group_of_json_and_messagepack_members_is_encoded_once_per_protocol(
    hub, pool, monkeypatch
):
    """WebSocket members of one group: 2 JSON, 3 MessagePack (binary frames), 1 MessagePack
    long poller. Each push is re-encoded once for all MessagePack members."""
    from realtime_dispatch.messenger.commands import create_chat

    users = [uuid.uuid4() for _ in range(6)]
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=users[0], title="t", members=users[1:])
    encodings = []
    real = fanout._encode_run

    def counting(protocol, records):
        encodings.append((protocol.name, len(records)))
        return real(protocol, records)

    monkeypatch.setattr(fanout, "_encode_run", counting)
    async with contextlib.AsyncExitStack() as stack:
        sockets = []
        for index, user in enumerate(users[:5]):
            headers = {"Authorization": f"Bearer {make_token(user)}"}
            ws = await stack.enter_async_context(
                connect(hub.ws_url, additional_headers=headers, ping_interval=None)
            )
            msgpack = index >= 2
            await ws.send(MSGPACK_HANDSHAKE if msgpack else JSON_HANDSHAKE.decode())
            answer = await ws.recv()
            assert answer == (b"{}\x1e" if msgpack else "{}" + RS)
            sockets.append((ws, msgpack))
        http = await stack.enter_async_context(http_client(hub))
        poller = LongPoller(http, make_token(users[5]))
        await poller.open(hub, make_token(users[5]), MSGPACK_HANDSHAKE)
        payload = {"chatId": str(chat), "seq": 1, "body": "hi"}
        await push(hub, f"chat:{chat}", "message_received", payload)
        for ws, msgpack in sockets:
            frame = await ws.recv()
            if msgpack:
                assert isinstance(frame, bytes)
                assert _msgpack(frame) == [[1, {}, None, "message_received", [payload], []]]
            else:
                assert isinstance(frame, str)
                assert _records(frame.encode())[0]["arguments"] == [payload]
        polled = _msgpack((await poller.get()).content)
        assert polled == [[1, {}, None, "message_received", [payload], []]]
        assert encodings == [("messagepack", 1)]
        assert {c.protocol.name for c in hub.hub.connections.values()} == {"json", "messagepack"}
        assert (await poller.delete()).status_code == 202


async def test_two_replicas_backplane_and_a_token_from_the_other_replica(
    database_url, pool, redis_url
):
    """Pushes from the backplane reach a MessagePack long poller like a WebSocket; the token
    negotiated on one replica gets a 404 on the other (no sticky session)."""
    from realtime_dispatch.delivery.push import Push
    from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher

    user = uuid.uuid4()
    token = make_token(user)
    settings = hub_settings(backplane_enabled=True, redis_url=redis_url)
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as one,
        running_hub(settings, dsn=database_url, pool=pool) as two,
        http_client(two) as http,
    ):
        stray = (await negotiate(one, token)).json()["connectionToken"]
        auth = {"Authorization": f"Bearer {token}"}
        lost = await http.get(HUB, params={"id": stray}, headers=auth)
        assert lost.status_code == 404
        assert "sticky sessions" in lost.text
        client = LongPoller(http, token)
        await client.open(two, token, MSGPACK_HANDSHAKE)
        worker = RedisHubPublisher(redis_url)
        try:
            [result] = await worker.publish([Push(user_group(user), "t", {"n": 1})])
            assert result is None
        finally:
            await worker.aclose()
        assert _msgpack((await client.get()).content) == [[1, {}, None, "t", [{"n": 1}], []]]
        assert (await client.delete()).status_code == 202


async def test_long_polling_client_that_only_polls_is_not_idle(pool, start_hub):
    """The official clients send no pings over long polling: polls keep the connection."""
    async with (
        start_hub(ping_interval=0.2, idle_timeout=0.6) as running,
        long_poller(running) as (_user, token, client),
    ):
        await client.open(running, token, JSON_HANDSHAKE)
        [connection] = running.hub.connections.values()
        pings = 0
        while pings < 8:  # each poll is answered by a ping: well past the idle timeout
            records = _records((await client.get()).content)
            assert {"type": 7} not in [{"type": r["type"]} for r in records], records
            pings += sum(r == {"type": 6} for r in records)
        assert connection.closing is None
        assert running.hub.connections
        assert (await client.delete()).status_code == 202


async def test_server_sent_events_slow_consumer_is_closed(pool, start_hub):
    """An SSE client that stops reading is closed like a WebSocket that stops reading."""
    async with start_hub(limits={"max_pending": 50, "close_grace": 0.5}) as running:
        user = uuid.uuid4()
        token = make_token(user)
        connection_token = (await negotiate(running, token)).json()["connectionToken"]
        _reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
        try:  # a stream whose reader never reads
            writer.write(
                f"GET {HUB}?id={connection_token}&access_token={token} HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            await writer.drain()
            async with http_client(running) as http:
                params = {"id": connection_token}
                auth = {"Authorization": f"Bearer {token}"}
                await http.post(HUB, params=params, content=JSON_HANDSHAKE, headers=auth)
            await wait_until(lambda: running.hub.connections, within=5)
            big = {"blob": "x" * 20_000}
            for _ in range(400):
                await push(running, user_group(user), "t", big)
            await wait_until(lambda: not running.hub.connections, within=10)
        finally:
            writer.transport.abort()
        value = running.hub.metrics_registry.get_sample_value(
            "messenger_realtime_hub_disconnects_total", {"reason": "slow_consumer"}
        )
        assert value == 1


async def test_long_polling_refused_handshake_is_answered_then_204(hub):
    async with long_poller(hub) as (_user, token, client):
        [reply] = _records(await client.open(hub, token, b'{"protocol":"xml","version":1}\x1e'))
        assert "not supported" in reply["error"]
        assert (await client.get()).status_code == 204
    assert not hub.hub.connections


async def test_long_polling_connection_of_a_revoked_user_is_closed(hub, pool):
    """A revocation closes a long-polling connection as it does a WebSocket: the waiting poll
    gets the close record; from then on a poll with the revoked token is refused, and one with
    a token issued after the revocation gets 204."""
    user = uuid.uuid4()
    old = mint_token(SECRET, user, now=time.time() - 2)
    async with http_client(hub) as http:
        client = LongPoller(http, old)
        assert _records(await client.open(hub, old, JSON_HANDSHAKE)) == [{}]
        [connection] = hub.hub.connections.values()
        state = hub.hub.http_transports.get(client.id)
        assert state is not None
        poller = state.poller
        assert poller is not None
        waiting = asyncio.create_task(client.get())
        await wait_until(lambda: poller.waiting)
        revocation = await revocation_store.revoke(pool, user)
        closing = await waiting
        assert _records(closing.content) == [{"type": 7, "error": "token revoked"}]
        assert connection.closing is not None
        assert connection.closing.reason is CloseReason.TOKEN_REVOKED
        assert (await client.get()).status_code == 401  # the revoked token
        fresh = mint_token(SECRET, user, now=revocation.revoked_at.timestamp() + 1)
        client.auth = {"Authorization": f"Bearer {fresh}"}
        assert (await client.get()).status_code == 204
        assert not hub.hub.connections


async def test_the_per_user_cap_holds_on_long_polling_and_server_sent_events(database_url, pool):
    """A user at REALTIME_HUB_MAX_CONNECTIONS_PER_USER is refused on the HTTP transports too:
    a token negotiated before the cap was reached opens neither a stream nor a first poll (the
    cap is checked before the negotiation is looked up)."""
    settings = hub_settings(hub_max_connections_per_user=1)
    async with running_hub(settings, dsn=database_url, pool=pool) as running:
        user = uuid.uuid4()
        token = make_token(user)
        async with http_client(running) as http:
            early = [(await negotiate(running, token)).json()["connectionToken"] for _ in range(2)]
            poller = LongPoller(http, token)
            assert _records(await poller.open(running, token, JSON_HANDSHAKE)) == [{}]
            # The one place is taken: a long poll and an SSE stream of the earlier
            # negotiations are refused before anything is opened.
            auth = {"Authorization": f"Bearer {token}"}
            refused = await http.get(HUB, params={"id": early[0]}, headers=auth)
            assert refused.status_code == 429
            assert "Too many connections" in refused.text
            stream = await http.get(
                HUB, params={"id": early[1]}, headers={**auth, "Accept": "text/event-stream"}
            )
            assert stream.status_code == 429
            assert len(running.hub.connections) == 1
            # Another user is not affected.
            assert (await negotiate(running, make_token(uuid.uuid4()))).status_code == 200
