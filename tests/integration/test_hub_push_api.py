"""The HTTP push endpoint (server side of the dispatcher's HTTP publisher), the batch
endpoint both as the hub's HTTP protocol answers it itself and through the ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import httpx
import orjson
import pytest

from realtime_dispatch.delivery.push import BATCH_PATH, MAX_BATCH_BYTES, Push
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.edge.http_protocol import HttpLimits
from realtime_dispatch.errors import HubUnavailable, PushRejected
from support.hub_wire import SERVICE_KEY, make_token
from support.procs import wait_until
from tests.hub_fixtures import SlowPostgresProxy, hub_settings, raw_client, running_hub

# The hub as ``realtime-dispatch hub`` serves the batch endpoint (by its HTTP protocol, without
# the app), and through the ASGI app.
HUB_SERVINGS = ["direct", "asgi"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "x"}])
async def test_refuses_missing_or_wrong_key(hub, headers):
    async with httpx.AsyncClient(base_url=hub.http_url) as http:
        response = await http.post(
            "/api/v1/hubs/messenger/groups/user:x",
            json={"target": "t", "arguments": []},
            headers=headers,
        )
        batch = await http.post(
            "/api/v1/hubs/messenger/batch",
            json={"pushes": [{"group": "user:x", "target": "t", "arguments": []}]},
            headers=headers,
        )
    assert response.status_code == 401
    assert batch.status_code == 401


async def test_accepts_and_delivers(hub):
    user = uuid.uuid4()
    auth = {"Authorization": f"Bearer {SERVICE_KEY}"}
    async with (
        raw_client(hub, make_token(user)) as client,
        httpx.AsyncClient(base_url=hub.http_url, headers=auth) as http,
    ):
        response = await http.post(
            f"/api/v1/hubs/messenger/groups/user:{user}",
            json={"target": "contact_added", "arguments": [{"a": 1}, 2]},
        )
        assert response.status_code == 202
        [record] = await client.invocations(1)
        assert record == {"type": 1, "target": "contact_added", "arguments": [{"a": 1}, 2]}
        bodies = [
            {"arguments": []},
            {"target": "", "arguments": []},
            [],
            {"target": "t", "arguments": 1},
        ]
        for body in bodies:
            bad = await http.post(f"/api/v1/hubs/messenger/groups/user:{user}", json=body)
            assert bad.status_code == 400


async def test_dispatcher_http_publisher_round_trip(hub):
    """The one-push form, as a worker of an older version sends it."""
    user = uuid.uuid4()
    publisher = HttpHubPublisher(hub.http_url, SERVICE_KEY, batch=False)
    wrong = HttpHubPublisher(hub.http_url, "nope")
    try:
        async with raw_client(hub, make_token(user)) as client:
            results = await publisher.publish([Push(f"user:{user}", "contact_added", {"n": 1})])
            assert list(results) == [None]
            [record] = await client.invocations(1)
            assert record["arguments"] == [{"n": 1}]
            [refused] = await wrong.publish([Push(f"user:{user}", "contact_added", {})])
            assert isinstance(refused, HubUnavailable)
    finally:
        await publisher.aclose()
        await wrong.aclose()


async def test_a_batch_is_one_publish_and_an_invalid_push_fails_alone(hub, monkeypatch):
    user = uuid.uuid4()
    me = f"user:{user}"
    barrier = hub.hub.membership.barrier
    barriers = []

    async def counted(within):
        barriers.append(within)
        return await barrier(within)

    monkeypatch.setattr(hub.hub.membership, "barrier", counted)
    auth = {"Authorization": f"Bearer {SERVICE_KEY}"}
    pushes = [
        {"group": me, "target": "first", "arguments": [{"n": 1}]},
        {"group": "bad\ngroup", "target": "t", "arguments": []},
        {"group": f"chat:{uuid.uuid4()}", "target": "", "arguments": []},
        {"group": me, "target": "t", "arguments": {}},
        "not a push",
        {"group": f"chat:{uuid.uuid4()}", "target": "nobody_here", "arguments": []},
        {"group": me, "target": "second", "arguments": [{"n": 2}, 3]},
    ]
    async with (
        raw_client(hub, make_token(user)) as client,
        httpx.AsyncClient(base_url=hub.http_url, headers=auth) as http,
    ):
        response = await http.post("/api/v1/hubs/messenger/batch", json={"pushes": pushes})
        assert response.status_code == 200
        statuses = [answer["status"] for answer in response.json()["results"]]
        assert statuses == [202, 400, 400, 400, 400, 202, 202]
        assert [r["target"] for r in await client.invocations(2)] == ["first", "second"]
        assert len(barriers) == 1  # the chat push among them: one barrier for the batch
        for body in ({"pushes": {}}, [], {"push": []}):
            bad = await http.post("/api/v1/hubs/messenger/batch", json=body)
            assert bad.status_code == 400
        many = [{"group": me, "target": "t", "arguments": []}] * 1001
        too_many = await http.post("/api/v1/hubs/messenger/batch", json={"pushes": many})
        assert too_many.status_code == 413
        await client.assert_silent(0.2)


async def test_worker_sends_a_batch_in_one_request(hub):
    user = uuid.uuid4()
    requests = []
    transport = httpx.AsyncHTTPTransport()

    class Counting(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            requests.append(request.url.path)
            return await transport.handle_async_request(request)

    publisher = HttpHubPublisher(hub.http_url, SERVICE_KEY, transport=Counting())
    pushes = [Push(f"user:{user}", "contact_added", {"n": n}) for n in range(5)]
    pushes.insert(2, Push("bad\ngroup", "contact_added", {}))
    try:
        async with raw_client(hub, make_token(user)) as client:
            results = await publisher.publish(pushes)
            records = await client.invocations(5)
    finally:
        await publisher.aclose()
        await transport.aclose()
    assert requests == ["/api/v1/hubs/messenger/batch"]
    assert [r["arguments"] for r in records] == [[{"n": n}] for n in range(5)]
    assert isinstance(results[2], PushRejected)
    assert results[2].code == "Http400"
    assert [r for i, r in enumerate(results) if i != 2] == [None] * 5


# --- the batch endpoint answered by the HTTP protocol itself ---------------------------------

AUTH = f"Bearer {SERVICE_KEY}"


def limited_hub(database_url, pool, limits: HttpLimits):
    return running_hub(hub_settings(), dsn=database_url, pool=pool, http_limits=limits)


@pytest.fixture
async def direct_hub(database_url, pool):
    async with limited_hub(database_url, pool, HttpLimits(header_timeout=1.0)) as running:
        yield running


@pytest.fixture
async def slow_barrier_hub(database_url, pool):
    """A hub whose membership barrier takes 0.5 s: its LISTEN connection is behind a proxy
    that holds every byte from the server that long."""
    async with (
        SlowPostgresProxy(database_url, delay=0.5) as slow,
        running_hub(hub_settings(), dsn=slow.url, pool=pool) as running,
    ):
        yield running


def batch_request(pushes, *, headers=None, auth=AUTH) -> bytes:
    body = orjson.dumps({"pushes": pushes})
    return (
        head(
            "POST",
            BATCH_PATH,
            {"Authorization": auth, "Content-Length": len(body), **(headers or {})},
        )
        + body
    )


def head(method: str, path: str, headers: dict[str, object], version: str = "1.1") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chat_pushes(count: int) -> list[dict[str, object]]:
    """``count`` pushes to a chat nobody is in: they wait for the membership barrier."""
    return [{"group": f"chat:{uuid.uuid4()}", "target": "t", "arguments": []}] * count


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


@contextlib.asynccontextmanager
async def connection(running):
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_two_batches_on_one_kept_alive_connection(direct_hub):
    """Both answered on the connection, with uvicorn's default headers; once idle, the next
    request's header timeout applies again (408)."""
    async with connection(direct_hub) as (reader, writer):
        for count in (1, 2):
            writer.write(batch_request(chat_pushes(count)))
            status, headers, body = await read_response(reader)
            assert status == 200
            assert orjson.loads(body) == {"results": [{"status": 202}] * count}
            assert headers["content-type"] == "application/json"
            assert {"date", "server"} <= headers.keys()
            assert "connection" not in headers
        status, _, _ = await asyncio.wait_for(read_response(reader), 5)
        assert status == 408
        assert await reader.read() == b""


async def test_connection_close_and_http_1_0_end_the_connection(direct_hub):
    requests = [
        batch_request(chat_pushes(1), headers={"Connection": "close"}),
        batch_request(chat_pushes(1)).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    ]
    for request in requests:
        async with connection(direct_hub) as (reader, writer):
            writer.write(request)
            status, headers, _ = await read_response(reader)
            assert (status, headers["connection"]) == (200, "close")
            assert await asyncio.wait_for(reader.read(), 5) == b""


async def test_pipelined_requests_are_answered_in_order(slow_barrier_hub):
    """A batch waiting on the barrier, then an app request, then two more batches, written at
    once: the answers come in the order asked, though the later ones are ready first."""
    healthz = head("GET", "/healthz", {})
    async with connection(slow_barrier_hub) as (reader, writer):
        writer.write(
            batch_request(chat_pushes(1))
            + healthz
            + batch_request([{"group": "user:x", "target": "t", "arguments": []}] * 2)
            + batch_request(chat_pushes(3))
        )
        answers = [await asyncio.wait_for(read_response(reader), 10) for _ in range(4)]
    assert [status for status, _, _ in answers] == [200] * 4
    bodies = [orjson.loads(body) for _, _, body in answers]
    assert bodies[1] == {"status": "ok"}
    assert [len(bodies[i]["results"]) for i in (0, 2, 3)] == [1, 2, 3]


async def test_a_wrong_key_is_refused_before_the_body_and_the_connection_lingers(direct_hub):
    """401 once the headers are in, the 1 MB body not sent yet; the client may go on writing
    (the server half-closed, it does not reset), then the connection ends."""
    async with connection(direct_hub) as (reader, writer):
        writer.write(
            head("POST", BATCH_PATH, {"Authorization": "Bearer wrong", "Content-Length": 1 << 20})
        )
        status, headers, body = await asyncio.wait_for(read_response(reader), 5)
        assert status == 401
        assert orjson.loads(body) == {
            "error": "missing or wrong service key",
            "code": "Unauthorized",
            "source": "realtime-dispatch-hub",
        }
        assert headers["connection"] == "close"
        writer.write(b"{" * 256 * 1024)  # discarded unparsed, no reset
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the server's FIN


async def test_a_declared_body_over_the_limit_is_refused_unread(direct_hub):
    async with connection(direct_hub) as (reader, writer):
        writer.write(
            head("POST", BATCH_PATH, {"Authorization": AUTH, "Content-Length": MAX_BATCH_BYTES + 1})
        )
        status, _, body = await asyncio.wait_for(read_response(reader), 5)
        assert (status, orjson.loads(body)["code"]) == (413, "BodyTooLarge")
        assert await asyncio.wait_for(reader.read(), 5) == b""


async def test_a_chunked_body_is_refused_once_past_the_limit(direct_hub):
    chunk = b"[" * 64 * 1024
    sent = 0
    async with connection(direct_hub) as (reader, writer):
        writer.write(
            head("POST", BATCH_PATH, {"Authorization": AUTH, "Transfer-Encoding": "chunked"})
        )
        answer = asyncio.ensure_future(read_response(reader))
        try:
            with contextlib.suppress(ConnectionError):
                while sent < 4 * MAX_BATCH_BYTES and not answer.done():
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
                    await writer.drain()
                    await asyncio.sleep(0)
            status, _, body = await asyncio.wait_for(answer, 5)
        finally:
            answer.cancel()
    assert (status, orjson.loads(body)["code"]) == (413, "BodyTooLarge")
    assert sent < 2 * MAX_BATCH_BYTES


async def test_a_client_gone_while_its_batch_waits_on_the_barrier(slow_barrier_hub):
    """Nothing is written to the closed connection, nothing crashes, no task is left, and the
    next batch is answered."""
    tasks = slow_barrier_hub.server.server_state.tasks
    async with connection(slow_barrier_hub) as (_, writer):
        writer.write(batch_request(chat_pushes(2)))
        await writer.drain()
        await wait_until(lambda: len(tasks) == 1, within=5)
    await wait_until(lambda: not tasks, within=5)
    async with httpx.AsyncClient(base_url=slow_barrier_hub.http_url) as http:
        answer = await http.post(
            BATCH_PATH, json={"pushes": chat_pushes(1)}, headers={"Authorization": AUTH}
        )
    assert answer.json() == {"results": [{"status": 202}]}


async def test_other_requests_are_served_by_the_app(direct_hub):
    """Another method, another path, ``Expect: 100-continue``: uvicorn and the app, as ever."""
    async with httpx.AsyncClient(base_url=direct_hub.http_url) as http:
        assert (await http.get(BATCH_PATH)).status_code == 405
        one = await http.post(
            "/api/v1/hubs/messenger/groups/user:x",
            json={"target": "t", "arguments": []},
            headers={"Authorization": AUTH},
        )
        assert one.status_code == 202
    body = orjson.dumps({"pushes": chat_pushes(1)})
    async with connection(direct_hub) as (reader, writer):
        headers = {"Authorization": AUTH, "Content-Length": len(body), "Expect": "100-continue"}
        writer.write(head("POST", BATCH_PATH, headers))
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == (
            b"HTTP/1.1 100 Continue\r\n\r\n"
        )
        writer.write(body)
        status, _, answer = await asyncio.wait_for(read_response(reader), 5)
        assert (status, orjson.loads(answer)) == (200, {"results": [{"status": 202}]})


async def test_a_failing_publish_is_answered_500(direct_hub, monkeypatch):
    async def broken(items):
        raise RuntimeError("broken")

    monkeypatch.setattr(direct_hub.hub, "publish_frames", broken)
    async with connection(direct_hub) as (reader, writer):
        for _ in range(2):  # the connection survives it
            writer.write(batch_request(chat_pushes(1)))
            status, _, body = await asyncio.wait_for(read_response(reader), 5)
            assert (status, orjson.loads(body)["code"]) == (500, "Internal")


@pytest.mark.parametrize(
    ("auth", "status"),
    [
        (AUTH, 200),  # exactly what the worker sends: the direct path's byte comparison
        (f"bearer {SERVICE_KEY}", 200),  # any other form of it: the general check, as before
        (f"Bearer  {SERVICE_KEY} ", 200),
        ("Bearer " + "x" * len(SERVICE_KEY), 401),  # as long as the key, not it
        (f"Bearer {SERVICE_KEY}x", 401),
        (f"Basic {SERVICE_KEY}", 401),
        ("Bearer ", 401),
    ],
)
async def test_the_key_is_read_as_the_app_reads_it(hub, auth, status):
    """The batch endpoint answers every form of the ``Authorization`` header as the app's check
    does, served directly or through the app."""
    async with connection(hub) as (reader, writer):
        writer.write(batch_request(chat_pushes(1), auth=auth))
        answer, _, body = await asyncio.wait_for(read_response(reader), 5)
    assert answer == status
    if status == 401:
        assert orjson.loads(body)["code"] == "Unauthorized"


async def test_the_first_authorization_header_is_the_one_read(hub):
    body = orjson.dumps({"pushes": chat_pushes(1)})
    for first, second, status in [(AUTH, "Bearer wrong", 200), ("Bearer wrong", AUTH, 401)]:
        request = (
            f"POST {BATCH_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {first}\r\n"
            f"Authorization: {second}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        async with connection(hub) as (reader, writer):
            writer.write(request.encode() + body)
            answer, _, _ = await asyncio.wait_for(read_response(reader), 5)
        assert answer == status


@pytest.fixture
async def body_timeout_hub(database_url, pool):
    async with limited_hub(database_url, pool, HttpLimits(body_timeout=1.0)) as running:
        yield running


async def test_a_body_in_another_read_than_its_head_is_timed(body_timeout_hub):
    """A batch whose body comes after its head, in time, is answered; one whose body stops
    coming is cut at the body timeout, unanswered; a body that came with its head arms nothing
    that could cut the connection later (it stays open, kept alive)."""
    request = batch_request(chat_pushes(2))
    split = request.index(b"\r\n\r\n") + 4
    async with connection(body_timeout_hub) as (reader, writer):
        writer.write(request[:split])
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(request[split:])
        status, _, body = await asyncio.wait_for(read_response(reader), 5)
        assert (status, len(orjson.loads(body)["results"])) == (200, 2)
        writer.write(request)  # whole, in one write: nothing left armed for its body
        status, _, _ = await asyncio.wait_for(read_response(reader), 5)
        assert status == 200
        await asyncio.sleep(1.5)  # past the body timeout
        writer.write(request)
        status, _, _ = await asyncio.wait_for(read_response(reader), 5)
        assert status == 200
    async with connection(body_timeout_hub) as (reader, writer):
        writer.write(request[: split + 5])
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert asyncio.get_running_loop().time() - started >= 0.9
