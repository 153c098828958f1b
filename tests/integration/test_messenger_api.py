"""The REST API through its ASGI app (``httpx.ASGITransport``) on a real PostgreSQL: bearer
auth, camelCase bodies, status codes, and invalid input refused with a clear message and
nothing written."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import uuid4

import asyncpg
import httpx
from prometheus_client import CollectorRegistry

from realtime_dispatch.messenger.api import create_api
from realtime_dispatch.messenger.api.send_rate import SendLimiter, SendRate
from support.hub_wire import SECRET, make_token
from tests.hub_fixtures import hub_settings
from tests.integration.messenger_scenario import Api, written


async def test_auth_is_required(api: Api) -> None:
    r = await api.call("POST", "/api/chats", None, {"title": "t"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"] == "Unauthorized"
    forged = make_token(uuid4(), secret="not-the-secret-but-long-enough-000")
    r = await api.http.post(
        "/api/chats", json={"title": "t"}, headers={"Authorization": f"Bearer {forged}"}
    )
    assert r.status_code == 401
    expired = make_token(uuid4(), ttl=-60)
    r = await api.http.get(f"/api/chats/{uuid4()}", headers={"Authorization": f"Bearer {expired}"})
    assert r.status_code == 401
    assert SECRET not in r.text


async def test_chat_messages_and_reads(api: Api) -> None:
    alice, bob, dave = uuid4(), uuid4(), uuid4()
    r = await api.call(
        "POST", "/api/chats", alice, {"title": " Deal ", "memberUserIds": [str(bob)]}
    )
    assert r.status_code == 201
    chat = r.json()["chatId"]
    r = await api.call("POST", f"/api/chats/{chat}/messages", bob, {"body": "hello"})
    assert r.status_code == 201
    sent = r.json()
    assert set(sent) == {"messageId", "seq", "sentAt"}
    assert sent["seq"] == 1
    await api.call("POST", f"/api/chats/{chat}/messages", alice, {"body": "second"})
    r = await api.call("GET", f"/api/chats/{chat}", alice)
    assert r.status_code == 200
    view = r.json()
    assert view["title"] == "Deal"
    assert view["lastSeq"] == 2
    assert {p["userId"]: p["active"] for p in view["participants"]} == {
        str(alice): True,
        str(bob): True,
    }
    r = await api.call(
        "GET", f"/api/chats/{chat}/messages", alice, params={"afterSeq": 1, "limit": 5}
    )
    [item] = r.json()["items"]
    assert item["seq"] == 2
    assert item["body"] == "second"
    assert item["deletedAt"] is None
    r = await api.call(
        "PATCH", f"/api/chats/{chat}/messages/{sent['messageId']}", alice, {"body": "x"}
    )
    assert (r.status_code, r.json()["error"]) == (403, "Forbidden")
    r = await api.call(
        "PATCH", f"/api/chats/{chat}/messages/{sent['messageId']}", bob, {"body": "hi!"}
    )
    assert r.status_code == 200
    assert r.json()["messageId"] == sent["messageId"]
    r = await api.call("DELETE", f"/api/chats/{chat}/messages/{sent['messageId']}", bob)
    assert r.status_code == 204
    assert r.content == b""
    r = await api.call("GET", f"/api/chats/{chat}/messages", bob)
    first = r.json()["items"][0]
    assert first["body"] is None
    assert first["deletedAt"] is not None
    assert (await api.call("POST", f"/api/chats/{chat}/read", bob, {"seq": 2})).status_code == 204
    r = await api.call("POST", f"/api/chats/{chat}/read", bob, {"seq": 9})
    assert (r.status_code, r.json()["error"]) == (400, "InvalidInput")
    # Non-members: 403 on an existing chat, 404 on a missing one.
    assert (await api.call("GET", f"/api/chats/{chat}", dave)).status_code == 403
    assert (await api.call("GET", f"/api/chats/{chat}/messages", dave)).status_code == 403
    r = await api.call("POST", f"/api/chats/{chat}/messages", dave, {"body": "let me in"})
    assert r.status_code == 403
    assert (await api.call("GET", f"/api/chats/{uuid4()}", alice)).status_code == 404
    # Membership: add, the creator removes, a member leaves.
    r = await api.call("POST", f"/api/chats/{chat}/participants", alice, {"userId": str(dave)})
    assert r.status_code == 204
    assert (await api.call("GET", f"/api/chats/{chat}", dave)).status_code == 200
    r = await api.call("DELETE", f"/api/chats/{chat}/participants/{alice}", dave)
    assert r.status_code == 403
    assert (
        await api.call("DELETE", f"/api/chats/{chat}/participants/{dave}", alice)
    ).status_code == 204
    assert (
        await api.call("DELETE", f"/api/chats/{chat}/participants/{bob}", bob)
    ).status_code == 204
    assert (await api.call("GET", f"/api/chats/{chat}", bob)).status_code == 403
    assert (
        await api.call("PATCH", f"/api/chats/{chat}", alice, {"title": "New"})
    ).status_code == 204


INVALID: list[tuple[str, str, Any, str]] = [
    ("POST", "/api/chats", {"title": ""}, "body.title"),
    ("POST", "/api/chats", {"title": "   "}, "body.title"),
    ("POST", "/api/chats", {"title": "x" * 201}, "body.title"),
    ("POST", "/api/chats", {"title": "t", "memberUserIds": ["bob"]}, "body.memberUserIds.0"),
    ("POST", "/api/chats", {"title": "t", "extra": 1}, "body.extra"),
    ("POST", "/api/chats", {}, "body.title"),
    ("POST", "/api/chats/{chat}/messages", {"body": ""}, "body.body"),
    ("POST", "/api/chats/{chat}/messages", {"body": "x" * 4001}, "body.body"),
    ("POST", "/api/chats/{chat}/messages", {"text": "hi"}, "body.body"),
    ("POST", "/api/chats/not-a-uuid/messages", {"body": "hi"}, "path.chatId"),
    ("POST", "/api/chats/{chat}/read", {"seq": -1}, "body.seq"),
    ("POST", "/api/chats/{chat}/read", {"seq": "one"}, "body.seq"),
    ("GET", "/api/chats/{chat}/messages?limit=0", None, "query.limit"),
    ("GET", "/api/chats/{chat}/messages?afterSeq=-1", None, "query.afterSeq"),
    ("POST", "/api/calls", {"calleeUserId": "x"}, "body.calleeUserId"),
    ("POST", "/api/recordings", {}, "exactly one of callId and conferenceId"),
    ("POST", "/api/recordings", {"callId": "{uuid}", "conferenceId": "{uuid}"}, "exactly one"),
    ("POST", "/api/screen-shares", {}, "exactly one of callId and conferenceId"),
    ("POST", "/api/recordings/{uuid}/failed", {"code": "has spaces"}, "body.code"),
    ("POST", "/api/contacts/requests", {"userId": 5}, "body.userId"),
    ("POST", "/api/blacklist", None, "body"),
]


async def test_invalid_input_is_refused_and_nothing_is_written(
    api: Api, pool: asyncpg.Pool
) -> None:
    alice = uuid4()
    chat = (await api.call("POST", "/api/chats", alice, {"title": "t"})).json()["chatId"]
    await api.call("POST", f"/api/chats/{chat}/messages", alice, {"body": "one"})
    before = await written(pool)
    for method, template, raw, where in INVALID:
        path = template.format(chat=chat, uuid=uuid4())
        body = raw
        if isinstance(raw, dict):
            body = {k: (str(uuid4()) if v == "{uuid}" else v) for k, v in raw.items()}
        r = await api.call(method, path, alice, body)
        assert r.status_code == 422, (template, raw, r.text)
        error = r.json()
        assert error["error"] == "InvalidRequest"
        assert where in error["message"], (template, raw, error["message"])
        assert all("input" not in d for d in error["details"])  # the value is not echoed
    assert await written(pool) == before


async def test_malformed_json_is_a_clear_422(api: Api, pool: asyncpg.Pool) -> None:
    before = await written(pool)
    r = await api.http.post(
        "/api/chats",
        content=b'{"title": ',
        headers={
            "Authorization": f"Bearer {make_token(uuid4())}",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == 422
    assert "JSON" in r.json()["message"]
    assert await written(pool) == before


async def test_social_and_media_endpoints(api: Api) -> None:
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    r = await api.call("POST", "/api/contacts/requests", alice, {"userId": str(bob)})
    assert r.status_code == 201
    request = r.json()["requestId"]
    r = await api.call("POST", f"/api/contacts/requests/{request}/accept", alice)
    assert r.status_code == 403
    r = await api.call("POST", f"/api/contacts/requests/{request}/accept", bob)
    assert r.status_code == 201
    contact = r.json()["contactId"]
    [item] = (await api.call("GET", "/api/contacts", alice)).json()["items"]
    assert item["contactId"] == contact
    assert item["userId"] == str(bob)
    assert (await api.call("DELETE", f"/api/contacts/{alice}", bob)).status_code == 204
    assert (await api.call("DELETE", f"/api/contacts/{alice}", bob)).status_code == 404

    r = await api.call("POST", "/api/blacklist", bob, {"userId": str(alice)})
    assert r.status_code == 201
    assert (
        await api.call("POST", "/api/blacklist", bob, {"userId": str(alice)})
    ).status_code == 409
    [blocked] = (await api.call("GET", "/api/blacklist", bob)).json()["items"]
    assert blocked["userId"] == str(alice)
    r = await api.call("POST", "/api/calls", alice, {"calleeUserId": str(bob)})
    assert (r.status_code, r.json()["message"]) == (403, "the user has blocked you")
    assert (await api.call("DELETE", f"/api/blacklist/{alice}", bob)).status_code == 204

    r = await api.call("POST", "/api/calls", alice, {"calleeUserId": str(bob)})
    assert r.status_code == 201
    call = r.json()["callId"]
    assert (await api.call("GET", f"/api/calls/{call}", carol)).status_code == 404
    assert (await api.call("POST", f"/api/calls/{call}/answer", alice)).status_code == 403
    assert (await api.call("POST", f"/api/calls/{call}/end", alice)).status_code == 409
    assert (await api.call("POST", f"/api/calls/{call}/answer", bob)).status_code == 204
    r = await api.call("POST", "/api/screen-shares", bob, {"callId": call})
    assert r.status_code == 201
    share = r.json()["screenShareId"]
    assert (await api.call("POST", f"/api/screen-shares/{share}/stop", alice)).status_code == 403
    assert (await api.call("POST", f"/api/screen-shares/{share}/stop", bob)).status_code == 204
    r = await api.call("POST", "/api/recordings", alice, {"callId": call})
    recording = r.json()["recordingId"]
    assert (
        await api.call("POST", f"/api/recordings/{recording}/available", alice)
    ).status_code == 409
    assert (await api.call("POST", f"/api/recordings/{recording}/stop", alice)).status_code == 204
    assert (
        await api.call("POST", f"/api/recordings/{recording}/available", bob)
    ).status_code == 204
    assert (await api.call("POST", f"/api/calls/{call}/end", bob)).status_code == 204
    view = (await api.call("GET", f"/api/calls/{call}", alice)).json()
    assert view["status"] == "Ended"
    assert view["roomName"].startswith("call-")
    assert "accessToken" not in view

    for verb in ("decline", "cancel"):
        call = (await api.call("POST", "/api/calls", alice, {"calleeUserId": str(bob)})).json()
        actor = bob if verb == "decline" else alice
        r = await api.call("POST", f"/api/calls/{call['callId']}/{verb}", actor)
        assert r.status_code == 204

    chat = (
        await api.call("POST", "/api/chats", alice, {"title": "t", "memberUserIds": [str(bob)]})
    ).json()["chatId"]
    r = await api.call("POST", f"/api/chats/{chat}/conferences", alice)
    assert r.status_code == 201
    conference = r.json()["conferenceId"]
    assert (await api.call("POST", f"/api/chats/{chat}/conferences", bob)).status_code == 409
    assert (await api.call("GET", f"/api/conferences/{conference}", carol)).status_code == 403
    r = await api.call("POST", f"/api/conferences/{conference}/invite", alice, {"userId": str(bob)})
    assert r.status_code == 204
    assert (await api.call("POST", f"/api/conferences/{conference}/join", bob)).status_code == 204
    r = await api.call("POST", "/api/recordings", bob, {"conferenceId": conference})
    recording = r.json()["recordingId"]
    r = await api.call("POST", f"/api/recordings/{recording}/failed", bob, {"code": "disk_full"})
    assert r.status_code == 204
    assert (await api.call("POST", f"/api/conferences/{conference}/leave", bob)).status_code == 204
    assert (await api.call("POST", f"/api/conferences/{conference}/end", bob)).status_code == 403
    assert (await api.call("POST", f"/api/conferences/{conference}/end", alice)).status_code == 204
    view = (await api.call("GET", f"/api/conferences/{conference}", bob)).json()
    assert view["status"] == "Ended"
    assert {e["userId"]: e["status"] for e in view["roster"]} == {
        str(alice): "Left",
        str(bob): "Left",
    }


async def test_openapi_and_docs(api: Api) -> None:
    spec = (await api.http.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in (
        "/api/chats",
        "/api/chats/{chatId}/messages/{messageId}",
        "/api/chats/{chatId}/read",
        "/api/calls/{callId}/answer",
        "/api/contacts/requests/{requestId}/accept",
        "/api/blacklist/{userId}",
        "/api/conferences/{conferenceId}/invite",
        "/api/recordings/{recordingId}/failed",
        "/api/screen-shares/{screenShareId}/stop",
    ):
        assert path in paths
    create = paths["/api/chats"]["post"]
    schema_ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = spec["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]
    assert set(body["properties"]) == {"title", "memberUserIds"}
    assert (await api.http.get("/docs")).status_code == 200


async def test_sends_and_edits_past_the_send_rate_get_429_and_a_repeat_is_free(
    pool: asyncpg.Pool,
) -> None:
    """H18: a burst of 3 at 1 a second: the fourth send (or edit) gets 429 with Retry-After and
    writes nothing; a retry of an accepted send (same clientMessageId) is answered 200 over the
    limit and costs nothing; another user's sends are not affected; the refusals are counted."""
    registry = CollectorRegistry()
    options = replace(hub_settings().api_options(), send_rate=SendRate(rate=1.0, burst=3))
    app = create_api(pool=pool, options=options, metrics_registry=registry)
    now = [0.0]  # the limiter's clock, moved by the test (a slow machine must not refill it)
    app.state.send_limiter = SendLimiter(options.send_rate, clock=lambda: now[0])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        api = Api(http)
        alice, bob = uuid4(), uuid4()
        body = {"title": "t", "memberUserIds": [str(bob)]}
        chat = (await api.call("POST", "/api/chats", alice, body)).json()
        path = f"/api/chats/{chat['chatId']}/messages"
        first = await api.call("POST", path, alice, {"body": "m0", "clientMessageId": "c0"})
        assert first.status_code == 201
        again = await api.call("POST", path, alice, {"body": "m0", "clientMessageId": "c0"})
        assert (again.status_code, again.json()) == (200, first.json())  # given back
        for n in (1, 2):
            assert (await api.call("POST", path, alice, {"body": f"m{n}"})).status_code == 201
        before = await written(pool)
        refused = await api.call("POST", path, alice, {"body": "m3"})
        assert refused.status_code == 429
        assert refused.json()["error"] == "TooManyRequests"
        assert "1 a second" in refused.json()["message"]
        assert refused.headers["retry-after"] == "1"
        message_id = first.json()["messageId"]
        edit = await api.call("PATCH", f"{path}/{message_id}", alice, {"body": "edited"})
        assert (edit.status_code, edit.headers["retry-after"]) == (429, "1")
        fresh = await api.call("POST", path, alice, {"body": "new", "clientMessageId": "c9"})
        assert fresh.status_code == 429  # a new clientMessageId is a new send
        assert await written(pool) == before  # nothing of the refused ones
        # Over the limit, the retry of an accepted send is still answered as a repeat, and a
        # clientMessageId reused for other content still a conflict.
        again = await api.call("POST", path, alice, {"body": "m0", "clientMessageId": "c0"})
        assert (again.status_code, again.json()) == (200, first.json())
        other = await api.call("POST", path, alice, {"body": "other", "clientMessageId": "c0"})
        assert other.status_code == 409
        assert (await api.call("POST", path, bob, {"body": "bob"})).status_code == 201
        assert (
            registry.get_sample_value("messenger_realtime_api_throttled_total", {"action": "send"})
            == 2
        )
        assert (
            registry.get_sample_value("messenger_realtime_api_throttled_total", {"action": "edit"})
            == 1
        )
        now[0] += 1.0  # one token back
        assert (await api.call("POST", path, alice, {"body": "m4"})).status_code == 201
        assert (await api.call("POST", path, alice, {"body": "m5"})).status_code == 429
