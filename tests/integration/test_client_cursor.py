"""The Python SDK's cursor keeps up during a session (keep-up reads of ``GET /api/sync``), so a
resume reads what it missed plus a bounded overlap; a chat first seen live costs no sync call
(the resync hook seeds it); an event name of the application's own reaches ``on(name)``."""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from realtime_dispatch.client import MessageReceived, MessengerClient
from realtime_dispatch.client.events import AppEvent, ContactRequestReceived
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.hub.connections.registry import user_group
from realtime_dispatch.messenger import contacts
from support.hub_wire import make_token
from support.procs import wait_until
from tests.integration.client_stack import QUICK_CLIENT, drop_everyone, messenger_stack

_BULK = """
WITH c AS (
    UPDATE messenger.chats SET last_seq = last_seq + $2 WHERE id = $1
    RETURNING last_seq - $2 AS base
), m AS (
    INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)
    SELECT gen_random_uuid(), $1, c.base + g, $3, 'bulk ' || (c.base + g)
    FROM c, generate_series(1, $2) g
    RETURNING id, seq
)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
SELECT 'MessageReceived', 'ChatGroup', $1, m.id, m.seq FROM m
"""
"""``$2`` messages of ``$3`` into chat ``$1`` and their pushes, in one statement."""


async def _away(stack: Any, pool: asyncpg.Pool, chat: UUID, sender: UUID, count: int) -> None:
    """``count`` messages written while the user is away: their rows Done, pushed to nobody."""
    await stack.stop_dispatcher()
    await pool.execute(_BULK, chat, count, sender)
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")


async def test_after_a_session_of_10000_pushes_a_resume_reads_what_it_missed(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool) as stack:
        options = dataclasses.replace(QUICK_CLIENT, cursor_idle=None)  # by count alone
        bob = MessengerClient(stack.url, make_token(stack.bob), options=options)
        async with bob, stack.client(stack.alice) as alice:
            received: list[MessageReceived] = []
            resumed: list[int] = []
            bob.on(MessageReceived, received.append)
            bob.on_resumed(resumed.append)
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            await bob.track(chat)
            for batch in range(10):  # 10,000 pushes, in batches the hub hands on at once
                await pool.execute(_BULK, chat, 1000, stack.alice)
                await wait_until(lambda n=batch: len(received) == (n + 1) * 1000, within=60)
            await bob.settled()
            # A keep-up read after every 1,000 live events (requests made while one runs fold
            # into one more round).
            assert bob.stats.cursor_reads >= 5
            await _away(stack, pool, chat, stack.alice, 10)
            drop_everyone(stack.hub)
            await wait_until(lambda: resumed, within=20)
            await bob.settled()
            assert resumed == [10]
            # What it missed, plus at most the live events since the last keep-up read was
            # asked for (before: the whole session, 10,010 events).
            assert 10 <= bob.stats.last_resume_read <= 10 + options.cursor_every
            assert bob.timeline(chat).contiguous_seq == 10_010
            assert bob.stats.full_resyncs == 1


async def test_a_session_older_than_the_retention_resumes_without_a_full_resync(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Retention deletes every row of the session (the floor rises past where its start's
    cursor was); the keep-up read had moved the cursor past them, so a reconnect that missed
    three messages reads those three, not ``limited``."""
    async with messenger_stack(database_url, pool) as stack:
        options = dataclasses.replace(QUICK_CLIENT, cursor_every=5, cursor_idle=None)
        bob = MessengerClient(stack.url, make_token(stack.bob), options=options)
        async with bob, stack.client(stack.alice) as alice:
            resumed: list[int] = []
            bob.on_resumed(resumed.append)
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            await bob.track(chat)
            start = bob.cursor
            await pool.execute(_BULK, chat, 5, stack.alice)
            await wait_until(lambda: bob.stats.cursor_reads == 1)
            await bob.settled()
            assert bob.cursor != start
            await pool.execute("DELETE FROM messenger.realtime_outbox")  # retention, all of it
            await _away(stack, pool, chat, stack.alice, 3)
            drop_everyone(stack.hub)
            await wait_until(lambda: resumed)
            await bob.settled()
            assert resumed == [3]
            assert bob.stats.full_resyncs == 1  # the first connect only: never `limited`
            assert bob.timeline(chat).contiguous_seq == 8


async def test_a_row_retried_past_the_cursors_move_is_still_delivered(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """A contact request whose push waits for its retry (its row Pending, not due for an hour)
    while three messages after it are pushed live: the keep-up read that moves the cursor past
    it delivers it (a cursor moves only by reading), and the client then disconnects before
    the retry; nothing is left for the resume."""
    async with messenger_stack(database_url, pool) as stack:
        options = dataclasses.replace(QUICK_CLIENT, cursor_every=3, cursor_idle=None)
        bob = MessengerClient(stack.url, make_token(stack.bob), options=options)
        async with bob, stack.client(stack.alice) as alice:
            order: list[str] = []
            bob.on(MessageReceived, lambda m: order.append(f"message {m.seq}"))
            bob.on(ContactRequestReceived, lambda _: order.append("request"))
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            await bob.track(chat)
            async with pool.acquire() as conn, conn.transaction():
                await contacts.request_contact(conn, requester=stack.alice, addressee=stack.bob)
                await conn.execute(
                    "UPDATE messenger.realtime_outbox SET attempts = 1,"
                    " next_attempt_at = now() + interval '1 hour'"
                )
            await pool.execute(_BULK, chat, 3, stack.alice)
            await wait_until(lambda: len(order) == 4)
            await bob.settled()
            assert bob.stats.cursor_reads == 1
            # The request came from the keep-up read, after the three pushed live.
            assert order == ["message 1", "message 2", "message 3", "request"]
            status = await pool.fetchval(
                "SELECT status FROM messenger.realtime_outbox WHERE kind = 'ContactRequestReceived'"
            )
            assert status == "Pending"  # its retry has not come yet
            resumed: list[int] = []
            bob.on_resumed(resumed.append)
            await stack.stop_dispatcher()
            drop_everyone(stack.hub)
            await wait_until(lambda: resumed)
            assert resumed == [0]
            assert order[-1] == "request"
            assert len(order) == 4


async def test_100_live_pushes_into_unseen_chats_cost_no_sync_call(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """With the application's own resync (an adopter's schema): ten chats with history Bob's
    client never saw, then ten live messages in each. The first push of each chat is not a
    gap: the hook is asked ``("new_chat", chat)`` and seeds the timeline from the
    application's history; no ``GET /api/sync`` for any of it."""
    async with messenger_stack(database_url, pool) as stack:
        asked: list[tuple[str, Any]] = []
        seeded: dict[Any, int] = {}

        async def resync(reason: str, chat_id: Any = None) -> None:
            asked.append((reason, chat_id))
            if reason == "new_chat":  # the application's own history (here: the REST API)
                history = await bob.rest.history_after(chat_id, 0)
                seeded[chat_id] = len(bob.seed(chat_id, history))

        options = dataclasses.replace(QUICK_CLIENT, cursor_idle=None)
        bob = MessengerClient(stack.url, make_token(stack.bob), options=options, resync=resync)
        async with stack.client(stack.alice) as alice:
            chats = [await alice.rest.create_chat(f"c{n}", [stack.bob]) for n in range(10)]
            for chat in chats:
                await pool.execute(_BULK, chat, 5, stack.alice)  # history before Bob connects
            await stack.stop_dispatcher()
            await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
            await stack.start_dispatcher()
            async with bob:
                live: list[MessageReceived] = []
                bob.on(MessageReceived, live.append)
                await bob.wait_connected()
                await bob.settled()
                assert asked == [("start", None)]
                pages = bob.stats.sync_pages
                for chat in chats:
                    await pool.execute(_BULK, chat, 10, stack.alice)
                await wait_until(lambda: len(live) == 100)
                await bob.settled()
                assert bob.stats.sync_pages - pages == 0
                assert sorted(asked[1:], key=str) == sorted(
                    [("new_chat", chat) for chat in chats], key=str
                )
                assert bob.stats.seeded == 10
                for chat in chats:
                    timeline = bob.timeline(chat)
                    assert [m.seq for m in timeline.messages()] == list(range(1, 16))
                    assert not timeline.has_gap
                assert set(seeded.values()) == {5}  # the pushes' copies were dropped


async def test_an_event_name_of_the_apps_own_reaches_on_by_name_deduplicated(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """``on("reaction_added", …)``: a push of a name the SDK has no model for, through the
    hub's publisher, arrives as an AppEvent in order with the built-in events; a second copy
    of its eventId is dropped as a duplicate."""
    async with messenger_stack(database_url, pool) as stack, stack.client(stack.bob) as bob:
        seen: list[str] = []
        reactions: list[AppEvent] = []
        bob.on("reaction_added", reactions.append)
        bob.on("reaction_added", lambda e: seen.append(e.name))
        bob.on("contact_request_received", lambda e: seen.append(type(e).__name__))
        await bob.wait_connected()
        await bob.settled()
        event_id = uuid4()
        chat = uuid4()
        reaction = {"eventId": str(event_id), "chatId": str(chat), "emoji": "👍"}
        request = {
            "eventId": str(uuid4()),
            "requestId": str(uuid4()),
            "fromUserId": str(stack.alice),
            "toUserId": str(stack.bob),
            "status": "Pending",
            "createdAt": "2026-01-01T00:00:00Z",
        }
        group = user_group(stack.bob)
        publisher = stack.hub.publisher()
        results = await publisher.publish(
            [
                Push(group, "reaction_added", reaction),
                Push(group, "contact_request_received", request),
                Push(group, "reaction_added", reaction),  # a second copy
            ]
        )
        assert results == [None, None, None], results
        await wait_until(lambda: len(seen) == 2 and bob.stats.duplicates_dropped == 1)
        assert seen == ["reaction_added", "ContactRequestReceived"]  # in the order pushed
        [reaction_event] = reactions
        assert reaction_event.event_id == event_id
        assert reaction_event.chat_id == str(chat)
        assert reaction_event.payload == reaction
