"""The hub's live signals put together: ``Typing`` (:mod:`.typing_signal`), presence
(:mod:`.presence`), and, with the backplane, their relay and store in Redis
(:mod:`.signal_backplane`, :mod:`.presence_store`). :func:`wire_signals` builds them for the
:class:`~.runtime.Hub`; the hub calls :class:`HubSignals` at its lifecycle's edges."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from realtime_dispatch.hub.connections.registry import USER_PREFIX
from realtime_dispatch.hub.metrics import PRESENCE_EVENTS, TYPING_OUTCOMES
from realtime_dispatch.hub.signals.methods import HubMethods, complete
from realtime_dispatch.hub.signals.presence import Presence
from realtime_dispatch.hub.signals.presence_online import OnlineState
from realtime_dispatch.hub.signals.presence_scope import WatchScope
from realtime_dispatch.hub.signals.presence_store import RedisPresenceStore
from realtime_dispatch.hub.signals.signal_backplane import SignalRelay
from realtime_dispatch.hub.signals.typing_signal import TypingSignals
from realtime_dispatch.hub.signals.wire_ids import parse_key
from realtime_dispatch.hub.wire.signal_envelope import is_signal
from realtime_dispatch.manifest.blacklist import BLOCKED_IN_CHAT_SQL
from realtime_dispatch.values.json_types import JsonValue
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

if TYPE_CHECKING:
    from realtime_dispatch.hub.connections.connection import HubConnection
    from realtime_dispatch.hub.connections.registry import GroupRegistry
    from realtime_dispatch.hub.membership.feed import MembershipFeed
    from realtime_dispatch.hub.metrics import HubMetrics

BLOCKERS_SQL = """
SELECT owner_user_id FROM messenger.blacklist
WHERE blocked_user_id = $1 AND owner_user_id = ANY($2::uuid[]) AND removed_at IS NULL
"""
"""The reference messenger's blacklist: which of the given users blocked the caller."""

SIGNAL_QUERIES = 4
"""The queries the live signals cause (a watch's chats and blockers, a typing pass's block
check) running at once on one replica; the others wait their turn. A flood of
``WatchPresence`` or ``Typing`` then holds at most this many of the pool's connections, and the
REST requests beside it keep the rest."""

Items = Sequence[tuple[str, bytes]]
BLOCK_MARK = b'"target":"blacklist_changed"'


def parse_block(group: str, record: bytes, keys: KeyCodec) -> tuple[Key, Key] | None:
    """``(owner, blocked)`` of a ``blacklist_changed`` push to ``user:{owner}`` that places a
    block; None for a lifted one, or what is not such a push."""
    try:
        message = orjson.loads(record.rstrip(b"\x1e"))
        payload = message["arguments"][0]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(payload, dict) or payload.get("blocked") is not True:
        return None
    owner = parse_key(group[len(USER_PREFIX) :], keys)
    blocked = parse_key(payload.get("blockedUserId"), keys)
    return None if owner is None or blocked is None else (owner, blocked)


@dataclass(eq=False)
class HubSignals:
    typing: TypingSignals
    presence: Presence
    relay: SignalRelay | None
    keys: KeyCodec = UUID_KEYS
    methods: HubMethods = field(init=False)

    def __post_init__(self) -> None:
        self.methods = HubMethods(self.typing, self.presence)

    def opened(self, connection: HubConnection) -> None:
        """A connection registered: it may invoke the hub methods, its user is online."""
        connection.invoke = self.methods.invoke
        self.presence.connected(connection.user_id)

    def closed(self, connection: HubConnection, reason: object = None) -> None:
        """A connection ending (still in the registry): its watches end with it."""
        self.presence.leaving(connection.connection_id, connection.user_id)

    def from_backplane(self, deliver: Callable[..., Awaitable[object]]) -> Callable[..., Any]:
        """``deliver`` for the backplane subscriber, the signals among what it brings taken
        out first (and fanned out by ``Typing``), the blocks among its pushes applied to
        presence (:meth:`observing`)."""
        typing = self.typing
        observing = self.observing(deliver)

        async def delivering(items: Items, *rest: Any) -> object:
            if any(is_signal(frame) for _, frame in items):
                items = typing.received(items)
                if not items:
                    return True
            return await observing(items, *rest)

        return delivering

    def observing(self, deliver: Callable[..., Awaitable[object]]) -> Callable[..., Any]:
        """``deliver``, the ``blacklist_changed`` pushes among what it is given applied to
        presence first: a block ends the blocked user's watches on the blocker here."""
        presence, keys = self.presence, self.keys

        async def delivering(items: Items, *rest: Any) -> object:
            for group, record in items:
                if group.startswith(USER_PREFIX) and BLOCK_MARK in record:
                    block = parse_block(group, record, keys)
                    if block is not None:
                        presence.blocked(*block)
            return await deliver(items, *rest)

        return delivering

    def tasks(self) -> Iterator[tuple[str, Coroutine[Any, Any, None]]]:
        yield "presence", self.presence.run()
        if self.relay is not None:
            yield "signal_relay", self.relay.run()

    async def aclose(self) -> None:
        await self.typing.aclose()
        await self.presence.aclose()
        if self.relay is not None:
            await self.relay.aclose()


class SignalOptions(Protocol):
    """What of :class:`~.runtime.HubOptions` the signals read (it is one)."""

    @property
    def typing_interval(self) -> float: ...
    @property
    def presence_grace(self) -> float: ...
    @property
    def presence_watch_limit(self) -> int: ...
    @property
    def presence_refresh(self) -> float: ...
    @property
    def presence_blocks(self) -> bool: ...
    @property
    def presence_chats_sql(self) -> str | None: ...
    @property
    def backplane_url(self) -> str | None: ...
    @property
    def backplane_mode(self) -> str: ...


def wire_signals(
    options: SignalOptions,
    registry: GroupRegistry,
    send_to_members: Callable[[Sequence[str], bytes], int],
    metrics: HubMetrics,
    *,
    replica_id: str,
    membership: MembershipFeed,
    publish: Callable[[Items], Awaitable[object]],
    subscribed: Callable[[], Awaitable[object]] | None = None,
    keys: KeyCodec = UUID_KEYS,
) -> HubSignals:
    typing_counts = {o: metrics.typing.labels(o) for o in TYPING_OUTCOMES}
    queries = asyncio.Semaphore(SIGNAL_QUERIES)
    presence_counts = {e: metrics.presence.labels(e) for e in PRESENCE_EVENTS}

    async def blocked_in_chat(user_id: Key, chat_id: JsonValue) -> bool:
        pool = membership.pool
        assert pool is not None
        chat = keys.from_json(chat_id)
        async with queries:
            return bool(await pool.fetchval(BLOCKED_IN_CHAT_SQL, chat, user_id, timeout=5.0))

    typing = TypingSignals(
        registry,
        send_to_members,
        interval=options.typing_interval,
        count=lambda outcome: typing_counts[outcome].inc(),
        counters={o: typing_counts[o].inc for o in ("sent", "throttled")},
        origin=replica_id,
        keys=keys,
        blocked_in_chat=blocked_in_chat if options.presence_blocks else None,
        complete=complete,
    )
    relay = None
    store = None
    if options.backplane_url:
        relay = SignalRelay(
            options.backplane_url,
            sharded=options.backplane_mode == "redis-cluster",
            on_dropped=typing_counts["dropped"].inc,
        )
        typing.relay = relay.send
        store = RedisPresenceStore(
            relay.client, replica_id=replica_id, refresh=options.presence_refresh, keys=keys
        )

    consent_sql = options.presence_chats_sql

    async def member_chats(users: list[Key]) -> list[tuple[Key, Key]]:
        async with queries:
            if consent_sql is None:
                return await membership.member_chats(users)
            pool = membership.pool
            assert pool is not None
            rows = await pool.fetch(consent_sql, users, timeout=5.0)
            return [(r["user_id"], r["chat_id"]) for r in rows]

    async def blockers(caller: Key, users: list[Key]) -> Collection[Key]:
        pool = membership.pool
        assert pool is not None
        async with queries:
            return [r[0] for r in await pool.fetch(BLOCKERS_SQL, caller, users, timeout=5.0)]

    def count(event: str, n: int) -> None:
        presence_counts[event].inc(n)

    grace, blocks = options.presence_grace, blockers if options.presence_blocks else None
    presence = Presence(
        registry,
        state=OnlineState(grace=grace, publish=publish, count=count, store=store, keys=keys),
        scope=WatchScope(
            registry,
            member_chats=member_chats,
            blockers=blocks,
            keys=keys,
            consent=consent_sql is not None,
        ),
        watch_limit=options.presence_watch_limit,
        complete=complete,
        count=count,
        subscribed=subscribed,
        keys=keys,
    )
    metrics.presence_watches.set_function(lambda: presence.watch_count)
    return HubSignals(typing, presence, relay, keys)
