"""The Python SDK resumes from its sync cursor: a reconnect reads ``GET /api/sync``, applies
what it missed through the same dedupe (``eventId``, then ``(chatId, seq)``), and falls back to
the full REST resync only when the server answers ``limited``."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.client import MessageReceived, MessengerClient
from realtime_dispatch.client.events import ContactRequestReceived
from realtime_dispatch.hub import Hub
from realtime_dispatch.messenger import contacts
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import hub_settings
from tests.integration.client_stack import QUICK_CLIENT, drop_everyone, messenger_stack


def heard(client: MessengerClient) -> tuple[list[MessageReceived], list[int]]:
    """The messages ``client`` reports from now on, and the resumes (their event counts)."""
    live: list[MessageReceived] = []
    resumed: list[int] = []
    client.on(MessageReceived, live.append)
    client.on_resumed(resumed.append)
    return live, resumed


async def pushed_to_nobody_then_resumed(
    pool: asyncpg.Pool, hub: Hub, client: MessengerClient, resumed: list[int]
) -> int:
    """Every row marked Done as if pushed while the client was away, then its connection
    dropped: once it has resumed and settled, its REST refetches before the drop."""
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    refetches = client.stats.refetches
    drop_everyone(hub)
    await wait_until(lambda: resumed)
    await client.settled()
    return refetches


async def test_a_reconnect_resumes_every_missed_event_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool) as stack, stack.client(stack.bob) as bob:
        live, resumed = heard(bob)
        requests: list[ContactRequestReceived] = []
        bob.on(ContactRequestReceived, requests.append)
        async with stack.client(stack.alice) as alice:
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            assert bob.cursor is not None
            assert bob.stats.full_resyncs == 1  # the first connect
            await bob.track(chat)
            await alice.rest.send_message(chat, "live")
            await wait_until(lambda: len(live) == 1)

            # Away: what is written now is pushed to nobody (as if bob's socket were dead).
            await stack.stop_dispatcher()
            for n in range(3):
                await alice.rest.send_message(chat, f"missed {n}")
            async with pool.acquire() as conn:
                await contacts.request_contact(conn, requester=stack.alice, addressee=stack.bob)
            refetches = await pushed_to_nobody_then_resumed(pool, stack.hub, bob, resumed)

            # "live" came again in the page (its push was before the cursor moved): dropped.
            assert resumed == [4]
            assert [m.body for m in live] == ["live", "missed 0", "missed 1", "missed 2"]
            assert len(requests) == 1
            assert [m.seq for m in bob.timeline(chat).messages()] == [1, 2, 3, 4]
            assert bob.stats.refetches == refetches  # no REST history was needed
            assert bob.stats.full_resyncs == 1

            # Rows after the cursor deleted (retention caught up with a long absence): the
            # server says limited, and the full resync brings the message back over REST.
            await alice.rest.send_message(chat, "purged")
            await pool.execute("DELETE FROM messenger.realtime_outbox")
            await stack.start_dispatcher()
            drop_everyone(stack.hub)
            await wait_until(lambda: bob.stats.full_resyncs == 2)
            await alice.rest.send_message(chat, "after")
            await wait_until(lambda: len(bob.timeline(chat)) == 6)
            await bob.settled()
            assert [m.body for m in bob.timeline(chat).messages()][-2:] == ["purged", "after"]
            assert bob.stats.duplicates_dropped >= 1


async def test_a_resume_pages_on_through_empty_pages_that_say_more(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """H15, the SDK's side: 2,500 rows of someone else's chat between Bob's cursor and what he
    missed; with a scan bound of 1,000 the first pages are empty with ``more``, and the client
    pages on to the message instead of stopping at the first empty page."""
    settings = hub_settings(sync_scan_limit=1000)
    async with (
        messenger_stack(database_url, pool, settings=settings) as stack,
        stack.client(stack.bob) as bob,
    ):
        live, resumed = heard(bob)
        async with stack.client(stack.alice) as alice:
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            await bob.track(chat)
            await stack.stop_dispatcher()
            await pool.execute(
                """
                INSERT INTO messenger.chats (id, title, created_by)
                VALUES (gen_random_uuid(), 'other', gen_random_uuid());
                INSERT INTO messenger.realtime_outbox
                    (kind, target_kind, chat_id, message_id, seq, status)
                SELECT 'MessageReceived', 'ChatGroup',
                       (SELECT id FROM messenger.chats WHERE title = 'other'),
                       gen_random_uuid(), g, 'Done'
                FROM generate_series(1, 2500) g
                """
            )
            await alice.rest.send_message(chat, "missed")
            refetches = await pushed_to_nobody_then_resumed(pool, stack.hub, bob, resumed)
            assert resumed == [1]
            assert [m.body for m in live] == ["missed"]
            assert bob.stats.refetches == refetches  # from the sync pages, not REST history


async def test_with_its_own_resync_a_gap_reads_on_from_the_cursor(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """An application's own ``resync`` (a deployment without the REST API): a push that never
    came (its row Done, pushed to nobody) shows as a seq gap when the next one arrives live;
    the client reads it from ``GET /api/sync``, never from REST history, and the hook is told
    only of the start."""
    async with messenger_stack(database_url, pool) as stack:
        reasons: list[str] = []
        bob = MessengerClient(
            stack.url, make_token(stack.bob), options=QUICK_CLIENT, resync=reasons.append
        )
        async with bob, stack.client(stack.alice) as alice:
            live: list[MessageReceived] = []
            bob.on(MessageReceived, live.append)
            chat = await alice.rest.create_chat("t", [stack.bob])
            await bob.wait_connected()
            await bob.settled()
            await alice.rest.send_message(chat, "one")
            await wait_until(lambda: len(live) == 1)
            await stack.stop_dispatcher()
            await alice.rest.send_message(chat, "never pushed")
            await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
            await stack.start_dispatcher()
            await alice.rest.send_message(chat, "three")
            await wait_until(lambda: len(bob.timeline(chat)) == 3)
            await bob.settled()
            assert [m.body for m in bob.timeline(chat).messages()] == [
                "one",
                "never pushed",
                "three",
            ]
            assert bob.stats.refetches == 0  # no REST history
            assert reasons == ["start"]
            assert bob.chats == {}  # the chat list is the application's, never fetched
