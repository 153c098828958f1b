"""REST as the source of truth for every pushed state, through the ASGI app on a real
PostgreSQL: File and Card messages, idempotent sends (also under a race), history both ways,
the caller's chats, contact requests, calls and conferences, and join credentials on request."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest

from tests.integration.messenger_scenario import Api, written
from tests.integration.messenger_world import MEDIA_SETTINGS, verify_media

FILE = {"fileId": "f-1", "name": "plan.pdf", "size": 12345, "contentType": "application/pdf"}


API_SETTINGS = MEDIA_SETTINGS  # the ``api`` fixture's (tests/integration/conftest.py)


async def _chat(api: Api, owner: UUID, *members: UUID, title: str = "t") -> str:
    r = await api.call(
        "POST", "/api/chats", owner, {"title": title, "memberUserIds": [str(m) for m in members]}
    )
    assert r.status_code == 201, r.text
    return str(r.json()["chatId"])


async def test_file_and_card_messages_are_sent_listed_and_edited_by_kind(api: Api) -> None:
    alice, bob = uuid4(), uuid4()
    chat = await _chat(api, alice, bob)
    path = f"/api/chats/{chat}/messages"
    r = await api.call("POST", path, alice, {"kind": "File", "fileMeta": FILE, "body": "see"})
    assert r.status_code == 201, r.text
    file_id = r.json()["messageId"]
    r = await api.call("POST", path, bob, {"kind": "Card", "cardText": "Meet at 5"})
    assert r.status_code == 201, r.text
    card_id = r.json()["messageId"]
    assert (await api.call("POST", path, bob, {"body": "plain"})).status_code == 201
    items = (await api.call("GET", path, alice)).json()["items"]
    assert [(m["kind"], m["fileMeta"], m["cardText"], m["body"]) for m in items] == [
        ("File", FILE, None, "see"),
        ("Card", None, "Meet at 5", None),
        ("Text", None, None, "plain"),
    ]
    # Edit: a Card by cardText, a Text by body, never a File.
    r = await api.call("PATCH", f"{path}/{card_id}", bob, {"cardText": "Meet at 6"})
    assert r.status_code == 200, r.text
    r = await api.call("PATCH", f"{path}/{file_id}", alice, {"body": "other"})
    assert r.status_code == 409
    r = await api.call("PATCH", f"{path}/{card_id}", bob, {"body": "not a card"})
    assert r.status_code == 400
    assert "cardText" in r.json()["message"]
    items = (await api.call("GET", path, alice)).json()["items"]
    assert items[1]["cardText"] == "Meet at 6"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "File"}, "fileMeta"),
        ({"kind": "File", "fileMeta": {**FILE, "size": -1}}, "size"),
        ({"kind": "File", "fileMeta": {**FILE, "contentType": "pdf"}}, "contentType"),
        ({"kind": "File", "fileMeta": {k: v for k, v in FILE.items() if k != "name"}}, "name"),
        ({"kind": "File", "fileMeta": FILE, "cardText": "x"}, "cardText"),
        ({"kind": "Card"}, "cardText"),
        ({"kind": "Card", "cardText": "x", "body": "y"}, "body"),
        ({"kind": "Card", "cardText": "x", "fileMeta": FILE}, "fileMeta"),
        ({"body": "x", "fileMeta": FILE}, "fileMeta"),
        ({"kind": "Sticker", "body": "x"}, "kind"),
        ({"body": "x", "clientMessageId": ""}, "clientMessageId"),
        ({"body": "x", "clientMessageId": "c" * 65}, "clientMessageId"),
    ],
)
async def test_each_kind_is_validated_strictly_and_nothing_is_written(
    api: Api, pool: asyncpg.Pool, body: dict[str, Any], field: str
) -> None:
    alice = uuid4()
    chat = await _chat(api, alice)
    before = await written(pool)
    r = await api.call("POST", f"/api/chats/{chat}/messages", alice, body)
    assert r.status_code == 422, r.text
    assert field in r.json()["message"]
    assert await written(pool) == before


async def test_a_repeated_client_message_id_returns_the_first_send(
    api: Api, pool: asyncpg.Pool
) -> None:
    alice, bob = uuid4(), uuid4()
    chat = await _chat(api, alice, bob)
    path = f"/api/chats/{chat}/messages"
    first = await api.call("POST", path, alice, {"body": "hi", "clientMessageId": "c-1"})
    assert first.status_code == 201
    before = await written(pool)
    again = await api.call("POST", path, alice, {"body": "hi", "clientMessageId": "c-1"})
    assert (again.status_code, again.json()) == (200, first.json())
    assert await written(pool) == before
    other = await api.call("POST", path, alice, {"body": "bye", "clientMessageId": "c-1"})
    assert other.status_code == 409
    assert await written(pool) == before
    # The key is per sender and chat: Bob's c-1 is a message of its own.
    r = await api.call("POST", path, bob, {"body": "hi", "clientMessageId": "c-1"})
    assert (r.status_code, r.json()["seq"]) == (201, 2)


async def test_eight_concurrent_sends_of_one_client_message_id_make_one_message(
    api: Api, pool: asyncpg.Pool
) -> None:
    alice = uuid4()
    chat = await _chat(api, alice)
    body = {"kind": "Card", "cardText": "once", "clientMessageId": "race"}
    answers = await asyncio.gather(
        *(api.call("POST", f"/api/chats/{chat}/messages", alice, body) for _ in range(8))
    )
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201]
    assert len({a.text for a in answers}) == 1
    messages = await pool.fetchval(
        "SELECT count(*) FROM messenger.messages WHERE chat_id = $1", UUID(chat)
    )
    rows = await pool.fetchval(
        "SELECT count(*) FROM messenger.realtime_outbox WHERE chat_id = $1"
        " AND kind = 'MessageReceived'",
        UUID(chat),
    )
    last_seq = await pool.fetchval("SELECT last_seq FROM messenger.chats WHERE id = $1", UUID(chat))
    assert (messages, rows, last_seq) == (1, 1, 1)


async def test_history_pages_backwards_from_before_seq(api: Api) -> None:
    alice = uuid4()
    chat = await _chat(api, alice)
    path = f"/api/chats/{chat}/messages"
    for n in range(1, 8):
        await api.call("POST", path, alice, {"body": f"m{n}"})
    latest = await api.call("GET", path, alice, params={"beforeSeq": 8, "limit": 3})
    assert [m["seq"] for m in latest.json()["items"]] == [5, 6, 7]
    older = await api.call("GET", path, alice, params={"beforeSeq": 5, "limit": 3})
    assert [m["seq"] for m in older.json()["items"]] == [2, 3, 4]
    first = await api.call("GET", path, alice, params={"beforeSeq": 2, "limit": 3})
    assert [m["seq"] for m in first.json()["items"]] == [1]
    after = await api.call("GET", path, alice, params={"afterSeq": 5})
    assert [m["seq"] for m in after.json()["items"]] == [6, 7]
    both = await api.call("GET", path, alice, params={"afterSeq": 1, "beforeSeq": 5})
    assert both.status_code == 422
    assert "beforeSeq" in both.json()["message"]


async def test_my_chats_most_recent_first_with_a_cursor_and_read_seq(api: Api) -> None:
    alice, bob = uuid4(), uuid4()
    chats = [await _chat(api, alice, bob, title=f"c{n}") for n in range(3)]
    left = await _chat(api, bob, alice, title="left")
    await api.call("DELETE", f"/api/chats/{left}/participants/{alice}", alice)
    await api.call("POST", f"/api/chats/{chats[0]}/messages", bob, {"body": "up"})
    await api.call("POST", f"/api/chats/{chats[0]}/read", alice, {"seq": 1})
    r = await api.call("GET", "/api/chats", alice, params={"limit": 2})
    assert r.status_code == 200
    page = r.json()
    assert [c["chatId"] for c in page["items"]] == [chats[0], chats[2]]
    assert set(page["items"][0]) == {"chatId", "title", "lastSeq", "readSeq", "updatedAt"}
    assert (page["items"][0]["lastSeq"], page["items"][0]["readSeq"]) == (1, 1)
    r = await api.call(
        "GET", "/api/chats", alice, params={"limit": 2, "cursor": page["nextCursor"]}
    )
    rest = r.json()
    assert ([c["chatId"] for c in rest["items"]], rest["nextCursor"]) == ([chats[1]], None)
    bad = await api.call("GET", "/api/chats", alice, params={"cursor": "garbage!"})
    assert bad.status_code == 422
    # H19: the same position spelled otherwise (a braced id, other digits) is no cursor.
    at, chat_id = base64.urlsafe_b64decode(page["nextCursor"] + "==").decode().split("|")
    arabic = at.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    for spelled in (f"{at}|{{{chat_id}}}", f"{at}|{chat_id.upper()}", f"{arabic}|{chat_id}"):
        cursor = base64.urlsafe_b64encode(spelled.encode()).decode().rstrip("=")
        bad = await api.call("GET", "/api/chats", alice, params={"cursor": cursor})
        assert bad.status_code == 422, spelled
    view = (await api.call("GET", f"/api/chats/{chats[0]}", bob)).json()
    assert {p["userId"]: p["readSeq"] for p in view["participants"]} == {
        str(alice): 1,
        str(bob): 0,
    }


async def test_contact_requests_are_listed_both_ways_and_declined(
    api: Api, pool: asyncpg.Pool
) -> None:
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    to_bob = (await api.call("POST", "/api/contacts/requests", alice, {"userId": str(bob)})).json()
    await api.call("POST", "/api/contacts/requests", carol, {"userId": str(bob)})
    items = (await api.call("GET", "/api/contacts/requests", bob)).json()["items"]
    assert {(i["fromUserId"], i["toUserId"]) for i in items} == {
        (str(alice), str(bob)),
        (str(carol), str(bob)),
    }
    mine = (await api.call("GET", "/api/contacts/requests", alice)).json()["items"]
    assert [i["requestId"] for i in mine] == [to_bob["requestId"]]
    decline = f"/api/contacts/requests/{to_bob['requestId']}/decline"
    before = await written(pool)
    assert (await api.call("POST", decline, alice)).status_code == 403
    assert (await api.call("POST", decline, carol)).status_code == 404
    assert await written(pool) == before
    assert (await api.call("POST", decline, bob)).status_code == 204
    assert (await api.call("POST", decline, bob)).status_code == 409
    assert (await api.call("GET", "/api/contacts/requests", alice)).json()["items"] == []


async def test_a_call_whose_pushes_were_all_lost_is_joined_through_rest_alone(api: Api) -> None:
    """Nobody is connected to the hub: every push of this call is lost. The callee finds the
    ringing call, gets join credentials minted for them, answers; both parties see it Active
    and the caller gets credentials of their own."""
    alice, bob, eve = uuid4(), uuid4(), uuid4()
    r = await api.call("POST", "/api/calls", alice, {"calleeUserId": str(bob)})
    call_id = r.json()["callId"]
    ringing = (await api.call("GET", "/api/calls", bob, params={"status": "Ringing"})).json()
    assert [c["callId"] for c in ringing["items"]] == [call_id]
    assert (await api.call("GET", "/api/calls", bob, params={"status": "Active"})).json() == {
        "items": []
    }
    r = await api.call("POST", f"/api/calls/{call_id}/media", bob)
    assert r.status_code == 200, r.text
    media = r.json()
    assert media["roomName"] == ringing["items"][0]["roomName"]
    claims = verify_media(media, subject=str(bob))
    assert claims["context"] == {"user": {"id": str(bob)}}
    assert (await api.call("POST", f"/api/calls/{call_id}/answer", bob)).status_code == 204
    active = (await api.call("GET", "/api/calls", alice, params={"status": "Active"})).json()
    assert [c["callId"] for c in active["items"]] == [call_id]
    r = await api.call("POST", f"/api/calls/{call_id}/media", alice)
    verify_media(r.json(), subject=str(alice))
    assert (await api.call("POST", f"/api/calls/{call_id}/media", eve)).status_code == 404
    await api.call("POST", f"/api/calls/{call_id}/end", alice)
    assert (await api.call("POST", f"/api/calls/{call_id}/media", bob)).status_code == 409


async def test_conference_recording_and_screen_share_are_readable(api: Api) -> None:
    alice, bob, eve = uuid4(), uuid4(), uuid4()
    chat = await _chat(api, alice, bob)
    assert (await api.call("GET", f"/api/chats/{chat}/conference", alice)).status_code == 404
    conf = (await api.call("POST", f"/api/chats/{chat}/conferences", alice)).json()
    conference_id = conf["conferenceId"]
    live = await api.call("GET", f"/api/chats/{chat}/conference", bob)
    assert live.status_code == 200
    assert live.json()["conferenceId"] == conference_id
    assert live.json()["roster"] == [{"userId": str(alice), "status": "Joined"}]
    assert (await api.call("GET", f"/api/chats/{chat}/conference", eve)).status_code == 403
    r = await api.call("POST", f"/api/conferences/{conference_id}/media", bob)
    assert r.status_code == 200, r.text
    claims = verify_media(r.json(), subject=str(bob))
    assert claims["context"] == {"user": {"id": str(bob)}, "group": chat}
    assert (
        await api.call("POST", f"/api/conferences/{conference_id}/media", eve)
    ).status_code == 403

    ref = {"conferenceId": conference_id}
    recording = (await api.call("POST", "/api/recordings", alice, ref)).json()["recordingId"]
    share = (await api.call("POST", "/api/screen-shares", bob, ref)).json()["screenShareId"]
    r = await api.call("GET", f"/api/recordings/{recording}", bob)
    assert (r.status_code, r.json()["status"], r.json()["sessionKind"]) == (
        200,
        "Recording",
        "Conference",
    )
    r = await api.call("GET", f"/api/screen-shares/{share}", alice)
    assert (r.status_code, r.json()["userId"], r.json()["stoppedAt"]) == (200, str(bob), None)
    assert (await api.call("GET", f"/api/recordings/{recording}", eve)).status_code == 403
    assert (await api.call("GET", f"/api/screen-shares/{uuid4()}", eve)).status_code == 404

    await api.call("POST", f"/api/conferences/{conference_id}/end", alice)
    assert (await api.call("GET", f"/api/chats/{chat}/conference", bob)).status_code == 404
    r = await api.call("POST", f"/api/conferences/{conference_id}/media", bob)
    assert r.status_code == 409


async def test_no_media_secret_means_503_never_a_payload_without_credentials(
    open_api: Callable[..., Any],
) -> None:
    alice, bob = uuid4(), uuid4()
    async with open_api() as api:
        call_id = (await api.call("POST", "/api/calls", alice, {"calleeUserId": str(bob)})).json()
        r = await api.call("POST", f"/api/calls/{call_id['callId']}/media", bob)
        assert r.status_code == 503
        assert r.json()["error"] == "MediaUnavailable"
        assert "accessToken" not in r.text
        chat = await _chat(api, alice, bob)
        conf = (await api.call("POST", f"/api/chats/{chat}/conferences", alice)).json()
        r = await api.call("POST", f"/api/conferences/{conf['conferenceId']}/media", alice)
        assert r.status_code == 503


NEW_OPERATIONS = [
    ("get", "/api/chats"),
    ("get", "/api/contacts/requests"),
    ("post", "/api/contacts/requests/{requestId}/decline"),
    ("get", "/api/calls"),
    ("post", "/api/calls/{callId}/media"),
    ("get", "/api/chats/{chatId}/conference"),
    ("post", "/api/conferences/{conferenceId}/media"),
    ("get", "/api/recordings/{recordingId}"),
    ("get", "/api/screen-shares/{screenShareId}"),
]


async def test_every_new_operation_is_in_openapi_and_in_the_docs(api: Api) -> None:
    schema = (await api.http.get("/openapi.json")).json()
    docs = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    for method, path in NEW_OPERATIONS:
        assert method in schema["paths"].get(path, {}), (method, path)
        assert f"{method.upper()} {path}" in docs, (method, path)
    send = schema["paths"]["/api/chats/{chatId}/messages"]
    assert {"200", "201"} <= set(send["post"]["responses"])
    params = {p["name"] for p in send["get"]["parameters"]}
    assert {"afterSeq", "beforeSeq", "limit"} <= params
    send_body = schema["components"]["schemas"]["SendMessage"]["properties"]
    assert {"kind", "body", "fileMeta", "cardText", "clientMessageId"} <= set(send_body)
