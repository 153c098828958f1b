"""The client SDK against the real messenger (REST + hub + dispatcher on a real PostgreSQL).

The spec's two client rows: a second delivery of one ``(chatId, seq)`` shows one message; a
dispatcher that is down between the owner's commit and the push leaves the rows Pending, they
are delivered once it runs again, and the client's timeline is complete through REST."""

from __future__ import annotations

import asyncio
from uuid import UUID, uuid4

import asyncpg
import pytest

from realtime_dispatch.client import (
    HubRefused,
    MessageDeleted,
    MessageEdited,
    MessageReceived,
    MessengerClient,
    ReadReceiptUpdated,
    RestError,
)
from realtime_dispatch.delivery.push import Push
from support.hub_wire import make_token
from support.procs import wait_until
from tests.integration.client_stack import QUICK_CLIENT, Stack, messenger_stack


async def _chat(stack: Stack) -> UUID:
    async with MessengerClient(stack.url, make_token(stack.alice)) as alice:
        return await alice.rest.create_chat("deal 42", [stack.bob])


def seqs(client: MessengerClient, chat: UUID) -> list[int]:
    return [m.seq for m in client.timeline(chat).messages()]


async def outbox_statuses(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT status FROM messenger.realtime_outbox ORDER BY id")
    return [r["status"] for r in rows]


async def test_a_second_delivery_of_one_chat_seq_shows_one_message(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool) as stack, stack.client(stack.bob) as bob:
        chat = await _chat(stack)
        live: list[MessageReceived] = []
        dropped: list[tuple[UUID, int]] = []
        bob.on(MessageReceived, live.append)
        bob.on_duplicate(lambda chat_id, seq: dropped.append((chat_id, seq)))
        await bob.track(chat)
        await connected_and_settled(bob)
        async with stack.http(stack.alice) as alice:
            sent = (await alice.post(f"/api/chats/{chat}/messages", json={"body": "once"})).json()
        await wait_until(lambda: len(live) == 1)
        # The dispatcher pushed, then died before recording Done: the row is pushed again.
        await wait_until(lambda: _all_done(pool))
        await pool.execute(
            "UPDATE messenger.realtime_outbox SET status = 'Pending', next_attempt_at = now()"
            " WHERE kind = 'MessageReceived'"
        )
        await wait_until(lambda: dropped == [(chat, sent["seq"])])
        await wait_until(lambda: _all_done(pool))
        await asyncio.sleep(0.1)
    assert [e.body for e in live] == ["once"]
    assert seqs(bob, chat) == [1]
    assert bob.stats.duplicates_dropped == 1


async def connected_and_settled(client: MessengerClient) -> None:
    """Until ``client`` is connected and its connect's own resume or resync is done: a test
    starts from there."""
    await client.wait_connected()
    await client.settled()


async def _all_done(pool: asyncpg.Pool) -> bool:
    return set(await outbox_statuses(pool)) == {"Done"}


async def test_rows_committed_while_the_dispatcher_is_down_arrive_later_and_rest_completes(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with (
        messenger_stack(database_url, pool, dispatcher=False) as stack,
        stack.client(stack.bob) as bob,
    ):
        chat = await _chat(stack)
        await bob.track(chat)
        await connected_and_settled(bob)
        live: list[int] = []
        bob.on(MessageReceived, lambda e: live.append(e.seq))
        async with stack.http(stack.alice) as alice:
            for n in range(3):
                r = await alice.post(f"/api/chats/{chat}/messages", json={"body": f"m{n}"})
                assert r.status_code == 201
        await asyncio.sleep(0.3)
        # Committed with their push intents (the chat's creation's too), and nothing pushed:
        # the dispatcher is down.
        assert await outbox_statuses(pool) == ["Pending"] * 4
        assert live == []
        # A second device of Bob's opens now: REST gives it the whole chat at once.
        async with stack.client(stack.bob) as tablet:
            await tablet.track(chat)
            assert seqs(tablet, chat) == [1, 2, 3]
            assert tablet.stats.recovered == 3
            await connected_and_settled(tablet)
            # The dispatcher comes back: the rows survived and are delivered.
            await stack.start_dispatcher()
            await wait_until(lambda: _all_done(pool))
            await wait_until(lambda: sorted(live) == [1, 2, 3])
            await wait_until(lambda: tablet.stats.duplicates_dropped == 3)
            assert seqs(tablet, chat) == [1, 2, 3]
        assert seqs(bob, chat) == [1, 2, 3]


async def test_a_seq_gap_in_the_pushes_is_filled_over_rest(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with (
        messenger_stack(database_url, pool, dispatcher=False) as stack,
        stack.client(stack.bob) as bob,
        stack.http(stack.alice) as alice,
    ):
        chat = await _chat(stack)
        await connected_and_settled(bob)
        resyncs: list[list[int]] = []
        bob.on_resync(lambda _, found: resyncs.append([m.seq for m in found]))
        sent = [
            (await alice.post(f"/api/chats/{chat}/messages", json={"body": f"m{n}"})).json()
            for n in range(1, 5)
        ]
        # The hub delivers 1 and 4 only (2 and 3 lost on the way).
        for item in (sent[0], sent[3]):
            payload = {
                "chatId": str(chat),
                "messageId": item["messageId"],
                "seq": item["seq"],
                "kind": "Text",
                "sentAt": item["sentAt"],
                "body": f"m{item['seq']}",
            }
            [error] = await stack.hub.publisher().publish(
                [Push(f"chat:{chat}", "message_received", payload)]
            )
            assert error is None
        await wait_until(lambda: seqs(bob, chat) == [1, 2, 3, 4])
        await bob.settled()
        assert [2, 3] in resyncs
        bodies = [m.body for m in bob.timeline(chat).messages()]
        assert bodies == ["m1", "m2", "m3", "m4"]


async def test_edits_deletions_and_read_receipts_reach_the_timeline(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with (
        messenger_stack(database_url, pool) as stack,
        stack.client(stack.bob) as bob,
        MessengerClient(stack.url, make_token(stack.alice), options=QUICK_CLIENT) as alice,
    ):
        chat = await alice.rest.create_chat("t", [stack.bob])
        await bob.track(chat)
        await connected_and_settled(bob)
        events: list[str] = []
        for kind in (MessageReceived, MessageEdited, MessageDeleted, ReadReceiptUpdated):
            bob.on(kind, lambda e: events.append(type(e).__name__))
        first = await alice.rest.send_message(chat, "helo")
        second = await alice.rest.send_message(chat, "to be deleted")
        await alice.rest.edit_message(chat, first.message_id, "hello")
        await alice.rest.delete_message(chat, second.message_id)
        await alice.rest.mark_read(chat, second.seq)
        await wait_until(lambda: len(events) == 5)
        [hello, deleted] = bob.timeline(chat).messages()
        assert (hello.body, hello.edited_at is not None, hello.deleted) == ("hello", True, False)
        assert (deleted.body, deleted.deleted) == (None, True)
        assert bob.timeline(chat).read_marks == {stack.alice: 2}
        with pytest.raises(RestError) as refused:
            await bob.rest.edit_message(chat, first.message_id, "not mine")
        assert refused.value.status == 403


async def test_a_bad_token_stops_the_client_with_hub_refused(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool, dispatcher=False) as stack:
        forged = make_token(uuid4(), secret="another-secret-of-at-least-32-bytes!!")
        with pytest.raises(HubRefused):
            async with MessengerClient(stack.url, forged, options=QUICK_CLIENT) as client:
                await asyncio.wait_for(client.wait_connected(), 10)
