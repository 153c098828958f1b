"""The HTTP push endpoint (server side of the dispatcher's HTTP publisher)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.errors import HubUnavailable
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
    assert response.status_code == 401


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
    user = uuid.uuid4()
    publisher = HttpHubPublisher(hub.http_url, SERVICE_KEY)
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
