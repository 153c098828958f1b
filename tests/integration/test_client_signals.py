"""The Python SDK's live signals against the messenger as ``serve`` assembles it: ``typing``
reaches the other member as a typed ``UserTyping``; ``watch_presence`` answers typed states and
``PresenceChanged`` follows the other user online and offline; the hub's refusals are
``HubMethodError``."""

from __future__ import annotations

from uuid import uuid4

import asyncpg
import pytest

from realtime_dispatch.client import HubMethodError, PresenceChanged, UserTyping
from support.procs import wait_until
from tests.hub_fixtures import create_shared_chat, hub_settings
from tests.integration.client_stack import drop_everyone, messenger_stack


async def test_typing_and_presence_through_the_sdk(database_url: str, pool: asyncpg.Pool) -> None:
    settings = hub_settings(hub_presence_grace=0.2, hub_presence_watch_limit=5)
    async with messenger_stack(database_url, pool, dispatcher=False, settings=settings) as stack:
        async with pool.acquire() as conn:
            chat = await create_shared_chat(
                conn, creator=stack.alice, title="t", members=[stack.bob]
            )
        async with stack.client(stack.alice) as alice:
            seen: list[PresenceChanged] = []
            typing: list[UserTyping] = []
            alice.on(PresenceChanged, seen.append)
            alice.on(UserTyping, typing.append)
            await alice.wait_connected()
            [state] = await alice.watch_presence([stack.bob, uuid4()])
            assert (state.user_id, state.online, state.last_seen_at) == (stack.bob, False, None)
            async with stack.client(stack.bob) as bob:
                await bob.wait_connected()
                await wait_until(lambda: [p.online for p in seen] == [True])
                await bob.typing(chat)
                await wait_until(lambda: len(typing) == 1)
                assert typing[0].user_id == stack.bob
                assert typing[0].chat_id == chat
                with pytest.raises(HubMethodError, match="not a member"):
                    await bob.typing(uuid4())
            await wait_until(lambda: [p.online for p in seen] == [True, False])
            assert seen[1].last_seen_at is not None
            await alice.unwatch_presence([stack.bob])
            with pytest.raises(HubMethodError, match="at most 5"):
                await alice.watch_presence([uuid4() for _ in range(6)])


async def test_the_sdk_watches_again_after_a_reconnect(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """Watches belong to a connection: after the hub drops Alice's, the SDK watches Bob again
    on the new one (its answer delivered as a ``PresenceChanged``), and Bob coming online
    reaches Alice without her watching again; an unwatched id is not watched again."""
    settings = hub_settings(hub_presence_grace=0.2)
    async with messenger_stack(database_url, pool, dispatcher=False, settings=settings) as stack:
        carol = uuid4()
        async with pool.acquire() as conn:
            await create_shared_chat(
                conn, creator=stack.alice, title="t", members=[stack.bob, carol]
            )
        async with stack.client(stack.alice) as alice:
            seen: list[PresenceChanged] = []
            alice.on(PresenceChanged, seen.append)
            await alice.wait_connected()
            states = await alice.watch_presence([stack.bob, carol])
            assert sorted(s.online for s in states) == [False, False]
            await alice.unwatch_presence([carol])
            drop_everyone(stack.hub)
            await wait_until(lambda: alice.stats.connects == 2 and alice.connected)
            await wait_until(lambda: [(p.user_id, p.online) for p in seen] == [(stack.bob, False)])
            async with stack.client(stack.bob) as bob:
                await bob.wait_connected()
                await wait_until(lambda: [p.online for p in seen] == [False, True])
            assert [(p.user_id, p.online) for p in seen] == [(stack.bob, False), (stack.bob, True)]
