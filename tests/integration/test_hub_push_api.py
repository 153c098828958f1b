"""The HTTP push endpoint (server side of the dispatcher's HTTP publisher)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.errors import HubUnavailable, PushRejected
from realtime_dispatch.push import Push
from tests.hub_fixtures import SERVICE_KEY, hub_settings, make_token, raw_client, running_hub


@pytest.fixture
async def hub(database_url, pool):
    async with running_hub(hub_settings(), dsn=database_url, pool=pool) as running:
        yield running


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
