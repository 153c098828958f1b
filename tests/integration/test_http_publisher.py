"""The worker's HTTP publisher against a real HTTP server: success and error classification."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.dispatch.publisher import Push
from realtime_dispatch.errors import HubUnavailable, PushRejected
from tests.conftest import free_port, wait_until


@contextlib.asynccontextmanager
async def target(
    statuses: dict[str, int], seen: list[tuple[str, bytes, str]]
) -> AsyncIterator[str]:
    async def push(request: Request) -> Response:
        group = request.path_params["group"]
        seen.append((group, await request.body(), request.headers.get("authorization", "")))
        if statuses.get(group) == -1:
            await asyncio.sleep(5)
        return Response(status_code=statuses.get(group, 202))

    app = Starlette(routes=[Route("/api/v1/hubs/messenger/groups/{group}", push, methods=["POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve())
    await wait_until(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 10)


async def test_statuses_map_to_outcomes_in_order_per_group() -> None:
    statuses = {
        "chat:bad": 400,
        "chat:down": 503,
        "chat:busy": 429,
        "chat:key": 401,
        "chat:slow": -1,
    }
    seen: list[tuple[str, bytes, str]] = []
    async with target(statuses, seen) as url:
        publisher = HttpHubPublisher(url, "svc", timeout=0.5)
        try:
            pushes = [
                Push("chat:ok", "message_received", {"seq": 1}),
                Push("chat:bad", "message_received", {"seq": 2}),
                Push("chat:down", "message_received", {"seq": 3}),
                Push("chat:busy", "message_received", {"seq": 4}),
                Push("chat:key", "message_received", {"seq": 5}),
                Push("chat:slow", "message_received", {"seq": 6}),
                Push("chat:ok", "message_edited", {"seq": 1}),
            ]
            results = await publisher.publish(pushes)
        finally:
            await publisher.aclose()
    assert results[0] is None
    assert isinstance(results[1], PushRejected)
    assert results[1].code == "Http400"
    assert isinstance(results[2], HubUnavailable)
    assert isinstance(results[3], HubUnavailable)
    assert isinstance(results[4], HubUnavailable)  # a wrong key is fixed by an operator
    assert isinstance(results[5], HubUnavailable)
    assert results[5].code == "Timeout"
    assert results[6] is None
    ok = [(body, auth) for group, body, auth in seen if group == "chat:ok"]
    assert [orjson.loads(body)["target"] for body, _ in ok] == [
        "message_received",
        "message_edited",
    ]
    assert orjson.loads(ok[0][0]) == {"target": "message_received", "arguments": [{"seq": 1}]}
    assert {auth for _, auth in ok} == {"Bearer svc"}


async def test_unreachable_hub_is_transient() -> None:
    publisher = HttpHubPublisher(f"http://127.0.0.1:{free_port()}", "svc", timeout=1)
    try:
        [result] = await publisher.publish([Push("user:x", "contact_removed", {})])
    finally:
        await publisher.aclose()
    assert isinstance(result, HubUnavailable)
    assert result.code == "Unreachable"
