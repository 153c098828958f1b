"""The watch decision of :class:`WatchScope` against changes heard while its queries run, and
the per-user ``WatchPresence`` rate (issue 47, point 4). The scope's two queries are its own
seams (``member_chats``, ``blockers``); here they wait for the test to change the memberships
in between, which a real hub does at its own pace (``test_hub_presence_race.py``)."""

from __future__ import annotations

import asyncio
import uuid

from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.signals.presence_online import presence_group
from realtime_dispatch.hub.signals.presence_scope import WatchScope
from realtime_dispatch.hub.signals.watch_rate import WatchRate
from realtime_dispatch.values.keys import Key

CHAT = "chat:x"


def _world() -> tuple[GroupRegistry, Key, Key]:
    registry = GroupRegistry()
    alice, bob = uuid.uuid4(), uuid.uuid4()
    registry.add_connection("a", alice)
    registry.join("a", CHAT)
    return registry, alice, bob


def _scope(registry: GroupRegistry, bob: Key, held: asyncio.Event, answer: list[Key]) -> WatchScope:
    async def member_chats(users: list[Key]) -> list[tuple[Key, Key]]:
        return [(bob, "x")] if bob in users else []

    async def blockers(caller: Key, users: list[Key]) -> list[Key]:
        await held.wait()  # the blacklist query is running
        return answer

    return WatchScope(registry, member_chats=member_chats, blockers=blockers)


async def _while_held(
    scope: WatchScope, alice: Key, bob: Key, held: asyncio.Event, change
) -> list[Key]:
    task = asyncio.create_task(scope.allowed("a", alice, [bob]))
    await asyncio.sleep(0)  # the load ran, the blacklist query waits
    await asyncio.sleep(0)
    change()
    held.set()
    return await task


async def test_a_removal_heard_during_the_blacklist_query_is_decided_on():
    registry, alice, bob = _world()
    held = asyncio.Event()
    scope = _scope(registry, bob, held, [])

    def removed() -> None:
        registry.leave("a", CHAT)
        scope.membership_changed(alice, CHAT, joined=False)

    assert await _while_held(scope, alice, bob, held, removed) == []


async def test_a_block_heard_during_the_blacklist_query_is_decided_on():
    registry, alice, bob = _world()
    held = asyncio.Event()
    scope = _scope(registry, bob, held, [])  # its answer predates the block
    assert await _while_held(scope, alice, bob, held, lambda: scope.blocked(bob, alice)) == []


async def test_nothing_heard_meanwhile_and_the_watch_is_allowed():
    registry, alice, bob = _world()
    held = asyncio.Event()
    scope = _scope(registry, bob, held, [])
    assert await _while_held(scope, alice, bob, held, lambda: None) == [bob]
    # ...and a user who comes to share a chat during the query, unchecked by the blacklist
    # query, is not let through (the next WatchPresence asks it).
    held = asyncio.Event()
    scope = _scope(registry, bob, held, [])
    registry.leave("a", CHAT)

    def joined() -> None:
        registry.join("a", CHAT)
        scope.membership_changed(alice, CHAT, joined=True)

    assert await _while_held(scope, alice, bob, held, joined) == []


async def test_kept_chats_of_a_user_being_decided_stay():
    """Another connection's watch ending meanwhile does not forget the chats this decision
    needs (it would then refuse a user it may watch)."""
    registry, alice, bob = _world()
    registry.add_connection("c", uuid.uuid4())
    registry.join("c", CHAT)
    held = asyncio.Event()
    scope = _scope(registry, bob, held, [])
    scope._chats[bob] = {CHAT}
    scope.add("c", [bob])

    def other_unwatches() -> None:
        scope.unwatch("c", presence_group(bob))

    assert await _while_held(scope, alice, bob, held, other_unwatches) == [bob]


def test_watch_rate_per_user_then_an_error():
    now = [0.0]
    rate = WatchRate(rate=2.0, burst=10, clock=lambda: now[0])
    alice, bob = uuid.uuid4(), uuid.uuid4()
    assert [rate.refusal(alice) for _ in range(10)] == [None] * 10
    refused = rate.refusal(alice)
    assert refused is not None
    assert refused.startswith("WatchPresence refused: at most 10 at once and 2 a second per user")
    assert rate.refusal(bob) is None  # per user
    now[0] += 0.5  # one token back
    assert rate.refusal(alice) is None
    assert rate.refusal(alice) is not None


def test_watch_rate_forgets_full_buckets():
    now = [0.0]
    rate = WatchRate(clock=lambda: now[0])
    for _ in range(1023):
        rate.refusal(uuid.uuid4())
    now[0] += 60
    rate.refusal(uuid.uuid4())
    assert len(rate) <= 1
