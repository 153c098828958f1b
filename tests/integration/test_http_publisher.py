"""The worker's HTTP publisher against a real HTTP server: success and error classification."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from realtime_dispatch.delivery.push import BATCH_PATH, Push, hub_problem
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.errors import HubUnavailable, PushRejected
from support.hub_wire import SERVICE_KEY
from support.procs import free_port
from tests.hub_fixtures import hub_settings, running_hub
from tests.integration.support import make_stack, new_chat, send
from tests.local_server import serving


@contextlib.asynccontextmanager
async def target(
    statuses: dict[str, int],
    seen: list[tuple[str, bytes, str]],
    *,
    delay: float = 0.0,
    bodies: dict[str, bytes] | None = None,
) -> AsyncIterator[str]:
    """A push endpoint answering ``statuses`` per group (-1: after 5 s) with ``bodies`` per
    group, each after ``delay`` seconds."""

    async def push(request: Request) -> Response:
        group = request.path_params["group"]
        seen.append((group, await request.body(), request.headers.get("authorization", "")))
        await asyncio.sleep(delay)
        if statuses.get(group) == -1:
            await asyncio.sleep(5)
        return Response((bodies or {}).get(group, b""), status_code=statuses.get(group, 202))

    app = Starlette(routes=[Route("/api/v1/hubs/messenger/groups/{group}", push, methods=["POST"])])
    async with serving(app, force_exit=True) as url:
        yield url


HUB_REFUSAL = orjson.dumps(hub_problem("invalid group name", "InvalidGroup"))
PROXY_PAGE = b"<html><body><h1>400 Bad Request</h1>nginx</body></html>"


async def test_statuses_map_to_outcomes_in_order_per_group() -> None:
    statuses = {
        "chat:bad": 400,
        "chat:down": 503,
        "chat:busy": 429,
        "chat:key": 401,
        "chat:slow": -1,
    }
    seen: list[tuple[str, bytes, str]] = []
    async with target(statuses, seen, bodies={"chat:bad": HUB_REFUSAL}) as url:
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


async def test_only_the_hubs_own_refusal_is_permanent() -> None:
    """A proxy or ingress in front of the hub (its error page, a 404 or 405 for a wrong path)
    must not quarantine a backlog in one pass: only the hub's own refusal body is permanent."""
    statuses = {
        "chat:hub": 400,
        "chat:big": 413,
        "chat:proxy": 400,
        "chat:path": 404,
        "chat:method": 405,
        "chat:json": 422,
        "chat:gateway": 502,
    }
    bodies = {
        "chat:hub": HUB_REFUSAL,
        "chat:big": orjson.dumps(hub_problem("body too large", "BodyTooLarge")),
        "chat:proxy": PROXY_PAGE,
        "chat:json": b'{"error": "bad", "code": "Nope"}',  # JSON, but not the hub's
    }
    seen: list[tuple[str, bytes, str]] = []
    async with target(statuses, seen, bodies=bodies) as url:
        publisher = HttpHubPublisher(url, "svc", timeout=5)
        try:
            groups = list(statuses)
            results = await publisher.publish([Push(g, "message_received", {}) for g in groups])
        finally:
            await publisher.aclose()
    by_group = dict(zip(groups, results, strict=True))
    assert {g for g, r in by_group.items() if isinstance(r, PushRejected)} == {
        "chat:hub",
        "chat:big",
    }
    for group in ("chat:proxy", "chat:path", "chat:method", "chat:json", "chat:gateway"):
        assert isinstance(by_group[group], HubUnavailable), group
    assert by_group["chat:path"].code == "Http404"  # type: ignore[union-attr]


async def test_the_hubs_refusal_quarantines_and_a_wrong_path_retries(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """Against the real push endpoint: an invalid target is refused by the hub itself; a hub URL
    with a wrong path prefix answers 404, which only retries."""
    async with running_hub(hub_settings(), dsn=database_url, pool=pool) as hub:
        publisher = HttpHubPublisher(hub.http_url, SERVICE_KEY, timeout=5)
        wrong = HttpHubPublisher(hub.http_url + "/behind-a-proxy", SERVICE_KEY, timeout=5)
        try:
            [invalid] = await publisher.publish([Push("user:x", "t" * 500, {})])
            [misrouted] = await wrong.publish([Push("user:x", "message_received", {})])
        finally:
            await publisher.aclose()
            await wrong.aclose()
    assert isinstance(invalid, PushRejected), invalid
    assert isinstance(misrouted, HubUnavailable), misrouted
    assert misrouted.code == "Http404"


async def test_an_older_hub_without_the_batch_form_gets_one_push_per_request() -> None:
    seen: list[tuple[str, bytes, str]] = []
    paths: list[str] = []
    transport = httpx.AsyncHTTPTransport()

    class Counting(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            paths.append(request.url.path)
            return await transport.handle_async_request(request)

    async with target({"chat:bad": 400}, seen, bodies={"chat:bad": HUB_REFUSAL}) as url:
        publisher = HttpHubPublisher(url, "svc", transport=Counting())
        try:
            first = await publisher.publish(
                [
                    Push("chat:a", "t", {"n": 1}),
                    Push("chat:bad", "t", {"n": 2}),
                    Push("chat:a", "t", {"n": 3}),
                ]
            )
            second = await publisher.publish([Push("chat:a", "t", {"n": 4})])
        finally:
            await publisher.aclose()
            await transport.aclose()
    assert first[0] is None
    assert first[2] is None
    assert isinstance(first[1], PushRejected)
    assert second == [None]
    assert paths.count(BATCH_PATH) == 1  # asked once, then remembered
    assert [orjson.loads(body)["arguments"] for group, body, _ in seen if group == "chat:a"] == [
        [{"n": 1}],
        [{"n": 3}],
        [{"n": 4}],
    ]


async def test_unreachable_hub_is_transient() -> None:
    publisher = HttpHubPublisher(f"http://127.0.0.1:{free_port()}", "svc", timeout=1)
    try:
        [result] = await publisher.publish([Push("user:x", "contact_removed", {})])
    finally:
        await publisher.aclose()
    assert isinstance(result, HubUnavailable)
    assert result.code == "Unreachable"


async def test_a_slow_hub_cannot_hold_a_pass_past_max_run_duration(pool: asyncpg.Pool) -> None:
    """One chat's pushes go one after another; at 0.3 s each, 12 of them would take 3.6 s."""
    chat, sender = await new_chat(pool)
    for i in range(12):
        await send(pool, chat, sender, f"m{i}")
    push_timeout, max_run = 1.0, 1.0
    seen: list[tuple[str, bytes, str]] = []
    async with target({}, seen, delay=0.3) as url:
        publisher = HttpHubPublisher(url, "svc", timeout=push_timeout)
        stack = make_stack(pool, publisher=publisher, max_run_duration=max_run)  # type: ignore[arg-type]
        try:
            report = await stack.dispatcher.run_pass()
        finally:
            await publisher.aclose()
    assert report.duration < max_run + push_timeout, report.duration
    assert report.more_waiting
    assert 0 < report.dispatched < 12
    states = await pool.fetch(
        "SELECT status, count(*) AS n FROM messenger.realtime_outbox GROUP BY status"
    )
    counts = {r["status"]: r["n"] for r in states}
    # What the pass did not push is still Pending, for the next pass.
    assert counts == {"Done": report.dispatched, "Pending": 12 - report.dispatched}
