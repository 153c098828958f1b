"""A new chat shows up for its members: ``POST /api/chats`` pushes ``chat_updated``
(``ChatCreated``) and adding a member pushes ``chat_updated`` (``MemberAdded``), each from an
outbox row of the changing transaction, through the REST API, the real dispatcher and the hub
as ``serve`` assembles them, to real WebSocket clients connected before the chat existed. The
new member's connection is in the chat's group before the push; an outsider receives nothing;
``GET /api/sync`` serves each member the events of their own membership."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import asyncpg

from support.hub_wire import make_token
from tests.hub_fixtures import RawClient, RunningHub, raw_client
from tests.integration.client_stack import Stack, messenger_stack


async def _cursor(stack: Stack, user: UUID) -> str:
    async with stack.http(user) as http:
        answer = await http.get("/api/sync")
    assert answer.status_code == 200, answer.text
    cursor: str = answer.json()["nextCursor"]
    return cursor


async def _resumed(stack: Stack, user: UUID, since: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with stack.http(user) as http:
        while True:
            page = (await http.get("/api/sync", params={"since": since})).json()
            events += page["events"]
            since = page["nextCursor"]
            if not page["more"] and not page["heldBack"]:
                return events


async def _chat_updated(client: RawClient) -> dict[str, Any]:
    [record] = await client.invocations(1, within=10)
    assert record["target"] == "chat_updated", record
    [payload] = record["arguments"]
    assert isinstance(payload, dict)
    return payload


async def _event_id(pool: asyncpg.Pool, chat: str, kind: str) -> str:
    """The outbox row of the chat event ``kind``: its id is the push's ``eventId``."""
    row_id = await pool.fetchval(
        "SELECT o.id FROM messenger.realtime_outbox o"
        " JOIN messenger.chat_events e ON e.id = o.ref_id"
        " WHERE o.kind = 'ChatUpdated' AND o.chat_id = $1 AND e.event_kind = $2",
        UUID(chat),
        kind,
    )
    assert row_id is not None, (chat, kind)
    return str(row_id)


async def _chat_event(
    pool: asyncpg.Pool, chat: str, kind: str, pushed: dict[str, Any], **users: str
) -> dict[str, Any]:
    """The ``chat_updated`` payload of the chat event ``kind``: the outbox row's id as its
    ``eventId``, the chat, ``users`` (actor, subject), and the event's id and time as pushed."""
    return {
        "eventId": await _event_id(pool, chat, kind),
        "chatId": chat,
        "chatEventId": pushed["eventId"],
        "eventKind": kind,
        **users,
        "occurredAt": pushed["occurredAt"],
    }


async def test_creating_a_chat_and_adding_a_member_push_chat_updated_to_the_members(
    database_url: str, pool: asyncpg.Pool
) -> None:
    carol, dave = uuid4(), uuid4()
    async with messenger_stack(database_url, pool) as stack:
        alice, bob = stack.alice, stack.bob
        port = int(stack.url.rsplit(":", 1)[1])
        running = RunningHub(hub=stack.hub, port=port, server=None)  # type: ignore[arg-type]
        cursors = {user: await _cursor(stack, user) for user in (bob, carol)}
        async with (
            raw_client(running, make_token(alice)) as alice_client,
            raw_client(running, make_token(bob)) as bob_client,
            raw_client(running, make_token(carol)) as carol_client,
            raw_client(running, make_token(dave)) as dave_client,
            stack.http(alice) as http,
        ):
            created = await http.post(
                "/api/chats", json={"title": "Lunch plans", "memberUserIds": [str(bob)]}
            )
            assert created.status_code == 201, created.text
            chat = created.json()["chatId"]
            announced = await _chat_updated(bob_client)
            assert announced == await _chat_event(
                pool, chat, "ChatCreated", announced, actorUserId=str(alice)
            )
            assert await _chat_updated(alice_client) == announced
            async with stack.http(bob) as bob_http:
                listed = (await bob_http.get("/api/chats")).json()["items"]
            assert [(c["chatId"], c["title"], c["lastSeq"]) for c in listed] == [
                (chat, "Lunch plans", 0)
            ]

            added = await http.post(f"/api/chats/{chat}/participants", json={"userId": str(carol)})
            assert added.status_code == 204, added.text
            # Carol's connection joined chat:{chatId} before the push: it is her first event.
            joined = await _chat_updated(carol_client)
            assert joined == await _chat_event(
                pool, chat, "MemberAdded", joined, actorUserId=str(alice), subjectUserId=str(carol)
            )
            for client in (alice_client, bob_client):
                assert await _chat_updated(client) == joined
            await dave_client.assert_silent(0.3)
            await carol_client.assert_silent(0.1)

        # Resumed: Bob, a member from the creation on, gets both; Carol only her joining.
        bob_events = await _resumed(stack, bob, cursors[bob])
        assert [e["payload"] for e in bob_events] == [announced, joined]
        assert {e["target"] for e in bob_events} == {"chat_updated"}
        carol_events = await _resumed(stack, carol, cursors[carol])
        assert [e["payload"] for e in carol_events] == [joined]
