"""The hub over a real socket: negotiate, auth, handshake, framing, pings, idle timeout, close."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from websockets.exceptions import InvalidStatus

from realtime_dispatch.hub.connections.registry import user_group
from support.hub_wire import RS, make_token
from tests.hub_fixtures import hub_settings, negotiate, push, raw_client, running_hub

# The hub as ``realtime-dispatch hub`` serves WebSockets (directly on the transport), and through
# the ASGI app as any other server would.
HUB_SERVINGS = ["direct", "asgi"]


async def test_negotiate_shape(hub):
    user = uuid.uuid4()
    response = await negotiate(hub, make_token(user))
    assert response.status_code == 200
    body = response.json()
    assert body["negotiateVersion"] == 1
    assert body["availableTransports"] == [
        {"transport": "WebSockets", "transferFormats": ["Text", "Binary"]},
        {"transport": "ServerSentEvents", "transferFormats": ["Text"]},
        {"transport": "LongPolling", "transferFormats": ["Text", "Binary"]},
    ]
    assert body["connectionId"]
    assert body["connectionToken"]
    assert body["connectionId"] != body["connectionToken"]
    assert "useStatefulReconnect" not in body
    stateful = (await negotiate(hub, make_token(user), stateful=True)).json()
    assert stateful["useStatefulReconnect"] is True
    legacy = (await negotiate(hub, make_token(user), version=0)).json()
    assert "connectionToken" not in legacy
    assert legacy["connectionId"]


@pytest.mark.parametrize(
    "token",
    [
        None,
        "not-a-jwt",
        make_token(uuid.uuid4(), ttl=-60),
        make_token(uuid.uuid4(), secret="another-secret-that-is-also-32-bytes-long"),
    ],
    ids=["missing", "garbage", "expired", "forged"],
)
async def test_bad_token_is_refused(hub, token):
    response = await negotiate(hub, token)
    assert response.status_code == 401
    with pytest.raises(InvalidStatus) as refused:
        async with raw_client(hub, token, handshake=None):
            pass
    assert refused.value.response.status_code == 401
    assert len(hub.hub.connections) == 0


async def test_token_without_exp_or_uuid_sub_is_refused(hub):
    import jwt

    from support.hub_wire import SECRET

    no_exp = jwt.encode({"sub": str(uuid.uuid4())}, SECRET, algorithm="HS256")
    bad_sub = make_token(uuid.uuid4(), sub="alice")
    for token in (no_exp, bad_sub):
        assert (await negotiate(hub, token)).status_code == 401


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("id_kind", ["token", "connection_id", "absent"])
async def test_connect_variants_receive_pushes(hub, version, id_kind):
    user = uuid.uuid4()
    token = make_token(user)
    body = (await negotiate(hub, token)).json()
    id_param = {
        "token": body["connectionToken"],
        "connection_id": body["connectionId"],
        "absent": None,
    }[id_kind]
    async with raw_client(hub, token, id_param=id_param, in_query=True, handshake=version) as c:
        await push(hub, user_group(user), "contact_request_received", {"n": 1})
        [record] = await c.invocations(1)
        assert record == {
            "type": 1,
            "target": "contact_request_received",
            "arguments": [{"n": 1}],
        }


async def test_handshake_errors(hub):
    token = make_token(uuid.uuid4())
    async with raw_client(hub, token, handshake=None) as c:
        await c.send_record({"protocol": "xml", "version": 1})
        reply = await c.next()
        assert "error" in reply
        assert "not supported" in reply["error"]
    async with raw_client(hub, token, handshake=None) as c:
        await c.send_record({"protocol": "json", "version": 7})
        assert "error" in await c.next()


async def test_records_split_across_frames_and_several_per_frame(hub):
    token = make_token(uuid.uuid4())
    async with raw_client(hub, token, handshake=None) as c:
        handshake = '{"protocol":"json","version":1}' + RS
        await c.send(handshake[:10])
        await c.send(handshake[10:])
        assert await c.next() == {}
        # Three invocations in one frame, the last split across two frames; `headers` ignored.
        records = [
            '{"type":1,"invocationId":"1","target":"Nope","arguments":[],"headers":{"a":"b"}}',
            '{"type":6}',
            '{"type":1,"invocationId":"2","target":"Other","arguments":[1]}',
        ]
        text = RS.join(records) + RS
        await c.send(text[:-20])
        await c.send(text[-20:])
        first = await c.next_of([3])
        second = await c.next_of([3])
        assert first == {"type": 3, "invocationId": "1", "error": "Unknown hub method 'Nope'."}
        assert second["invocationId"] == "2"
        assert "Other" in second["error"]
        # A non-blocking invocation (no id) gets no completion, and the connection stays up.
        await c.send_record({"type": 1, "target": "Nope", "arguments": []})
        [connection] = hub.hub.connections.values()
        await push(hub, user_group(connection.user_id), "x", {})
        assert (await c.next_of([1, 3]))["type"] == 1


async def test_garbage_closes_with_error_message(hub):
    token = make_token(uuid.uuid4())
    async with raw_client(hub, token) as c:
        await c.send(b"\xff\xfe not json" + RS.encode())
        close = await c.next_of([7])
        assert close["error"].startswith("Connection closed with an error")
    await _no_connections(hub)


async def test_oversized_frame_is_refused(hub):
    token = make_token(uuid.uuid4())
    async with raw_client(hub, token) as c:
        big = '{"type":1,"target":"x","arguments":["' + "a" * 40_000 + '"]}' + RS
        await c.send(big)
        close = await c.next_of([7])
        assert "too big" in close["error"]
    await _no_connections(hub)
    snapshot = hub.hub.metrics_registry.get_sample_value(
        "messenger_realtime_hub_disconnects_total", {"reason": "message_too_big"}
    )
    assert snapshot == 1


async def _no_connections(hub):
    from support.procs import wait_until

    await wait_until(lambda: not hub.hub.connections, within=5)


async def test_pings_and_idle_timeout(database_url, pool):
    settings = hub_settings(hub_ping_interval=0.2, hub_idle_timeout=0.9)
    async with running_hub(settings, dsn=database_url, pool=pool) as running:
        token = make_token(uuid.uuid4())
        async with raw_client(running, token) as c:
            assert await c.next(within=2) == {"type": 6}
            loop = asyncio.get_running_loop()
            started = loop.time()
            close = await c.next_of([7], within=3)
            assert "timeout" in close["error"].lower()
            assert loop.time() - started >= 0.5
        await _no_connections(running)


async def test_client_pings_keep_connection_alive(database_url, pool):
    settings = hub_settings(hub_ping_interval=0.2, hub_idle_timeout=0.6)
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as running,
        raw_client(running, make_token(uuid.uuid4())) as c,
    ):
        for _ in range(8):  # a client pinging every 0.15 s outlives a 0.6 s idle timeout
            await c.send_record({"type": 6})
            await asyncio.sleep(0.15)
        assert len(running.hub.connections) == 1


async def test_close_message_on_shutdown(database_url, pool):
    settings = hub_settings()
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as running,
        raw_client(running, make_token(uuid.uuid4())) as c,
    ):
        running.server.should_exit = True
        close = await c.next_of([7])
        assert close.get("allowReconnect") is True


async def test_slow_consumer_is_closed(pool, start_hub):
    async with start_hub(limits={"max_pending": 50, "close_grace": 0.5}) as running:
        user = uuid.uuid4()
        async with raw_client(running, make_token(user)):
            big = {"blob": "x" * 20_000}
            group = user_group(user)
            for _ in range(400):  # the client never reads
                running.hub.send_to_group(group, '{"type":1,"target":"t","arguments":[]}' + RS)
                await push(running, group, "t", big)
            await _no_connections(running)
        value = running.hub.metrics_registry.get_sample_value(
            "messenger_realtime_hub_disconnects_total", {"reason": "slow_consumer"}
        )
        assert value == 1


async def test_health_ready_metrics(hub):
    async with httpx.AsyncClient(base_url=hub.http_url) as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        async with raw_client(hub, make_token(uuid.uuid4())):
            text = (await http.get("/metrics")).text
            assert 'messenger_realtime_hub_connections{state="open"} 1.0' in text
        assert "messenger_realtime_hub_sent_frames_total" in text
        assert "messenger_realtime_hub_disconnects_total" in text


async def test_token_never_logged(hub, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="websockets.client")  # the test's own client
    token = make_token(uuid.uuid4())
    async with raw_client(hub, token, in_query=True):
        pass
    with pytest.raises(InvalidStatus):
        async with raw_client(hub, token + "x", in_query=True, handshake=None):
            pass
    assert token.split(".")[2] not in caplog.text
    assert "ASGI callable" not in caplog.text


async def test_each_push_is_one_prebuilt_frame_written_to_the_transport(hub):
    user = uuid.uuid4()
    records = [f'{{"type":1,"target":"t","arguments":[{n}]}}{RS}'.encode() for n in range(3)]
    async with raw_client(hub, make_token(user)) as c:
        (connection,) = hub.hub.connections.values()
        assert connection.sink is not None  # uvicorn handed over the raw transport
        delivered = hub.hub.send_to_groups([(user_group(user), r) for r in records])
        assert delivered == 3
        frames = [await asyncio.wait_for(c.ws.recv(), 5) for _ in records]
        # written straight to the transport as three frames, not coalesced by the writer task
        assert frames == [r.decode() for r in records]


async def test_runs_of_records_for_one_group_keep_order_across_groups(hub):
    """Consecutive records for one group go to each member as one joined piece; interleaved
    groups still arrive in order, each record its own frame, and every record is counted."""
    both, only_chat = uuid.uuid4(), uuid.uuid4()

    def record(name: str) -> bytes:
        return f'{{"type":1,"target":"t","arguments":["{name}"]}}{RS}'.encode()

    async with raw_client(hub, make_token(both)) as a, raw_client(hub, make_token(only_chat)) as b:
        by_user = {c.user_id: c for c in hub.hub.connections.values()}
        for user in (both, only_chat):
            hub.hub.registry.join(by_user[user].connection_id, "chat:runs")
        registry = hub.hub.metrics_registry

        def sent_frames() -> float:
            return registry.get_sample_value("messenger_realtime_hub_sent_frames_total") or 0.0

        sent = sent_frames()
        chat, mine = "chat:runs", user_group(both)
        items = [(chat, record("c1")), (chat, record("c2")), (mine, record("u1"))]
        items += [(chat, record("c3"))]
        assert hub.hub.send_to_groups(items) == 3 * 2 + 1
        assert sent_frames() - sent == 7
        got_a = [await asyncio.wait_for(a.ws.recv(), 5) for _ in range(4)]
        got_b = [await asyncio.wait_for(b.ws.recv(), 5) for _ in range(3)]
        assert got_a == [record(n).decode() for n in ("c1", "c2", "u1", "c3")]
        assert got_b == [record(n).decode() for n in ("c1", "c2", "c3")]


async def test_pushes_without_a_raw_transport_go_through_asgi(database_url, pool):
    settings = hub_settings()
    async with running_hub(settings, dsn=database_url, pool=pool, plain_asgi=True) as running:
        user = uuid.uuid4()
        async with raw_client(running, make_token(user)) as c:
            (connection,) = running.hub.connections.values()
            assert connection.sink is None
            running.hub.send_to_groups(
                [
                    (user_group(user), f'{{"type":1,"target":"t","arguments":[{n}]}}{RS}'.encode())
                    for n in range(3)
                ]
            )
            got = [(await c.next_of([1]))["arguments"] for _ in range(3)]
            assert got == [[0], [1], [2]]
