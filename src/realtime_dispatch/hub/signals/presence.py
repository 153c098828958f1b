"""Presence: ``WatchPresence(userIds)`` / ``UnwatchPresence(userIds)`` and ``presence_changed``
``{userId, online, lastSeenAt}``, scoped to the people a caller shares a chat with.

:class:`Presence` is what the hub calls: it answers the two methods and composes

* :class:`~.presence_online.OnlineState`: who this replica holds online (their grace, their
  ``lastSeenAt``) and the announcements of their flips, across replicas through a
  :class:`~.presence_store.RedisPresenceStore`;
* :class:`~.presence_scope.WatchScope`: who a connection may watch (shares an active chat, did
  not block it) and its watches, each a group ``presence:{userId}`` in the hub's registry, kept
  true as memberships change and blocks are made.

User ids are of the owner's key type (``REALTIME_KEY_TYPE``): ``WatchPresence`` takes them as
that type's JSON (a number or a decimal string for bigint keys), the answers and events carry
them as the type shows them (a JSON number for bigint).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

import structlog

from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.signals.presence_online import (
    PRESENCE_CHANGED,
    PRESENCE_PREFIX,
    OnlineState,
    PresenceStore,
    iso_now,
    presence_entry,
    presence_group,
)
from realtime_dispatch.hub.signals.presence_scope import (
    WatchScope,
    user_of_group,
)
from realtime_dispatch.hub.signals.watch_rate import WatchRate
from realtime_dispatch.hub.signals.wire_ids import parse_key
from realtime_dispatch.hub.wire.protocol import Invocation
from realtime_dispatch.values.json_types import JsonValue
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

if TYPE_CHECKING:
    from realtime_dispatch.hub.connections.connection import HubConnection

log = structlog.get_logger(__name__)

__all__ = [
    "PRESENCE_CHANGED",
    "PRESENCE_PREFIX",
    "Presence",
    "PresenceStore",
    "iso_now",
    "parse_ids",
    "presence_entry",
    "presence_group",
    "user_of_group",
]

BAD_ARGUMENTS = "{method} takes one argument: a list of user ids."
OVER_LIMIT = "{method} refused: at most {limit} watched users per connection."
BUSY = "WatchPresence refused: the previous WatchPresence has not completed."
UNAVAILABLE = "WatchPresence failed: presence is unavailable, try again."

Complete = Callable[["HubConnection", str | None, str | None, JsonValue], None]


def parse_ids(
    arguments: tuple[JsonValue, ...], method: str, limit: int, keys: KeyCodec = UUID_KEYS
) -> list[Key] | str:
    """The distinct user ids of a ``WatchPresence`` / ``UnwatchPresence``, in order, or the
    error to answer: not one list of ids of the key type, or a list longer than ``limit`` (not
    read further)."""
    if len(arguments) != 1 or not isinstance(arguments[0], list):
        return BAD_ARGUMENTS.format(method=method)
    raw = arguments[0]
    if len(raw) > limit:
        return OVER_LIMIT.format(method=method, limit=limit)
    ids: dict[Key, None] = {}
    for entry in raw:
        user_id = parse_key(entry, keys)
        if user_id is None:
            return BAD_ARGUMENTS.format(method=method)
        ids[user_id] = None
    return list(ids)


@dataclass(eq=False)
class Presence:
    """Presence on this replica: who is online (:attr:`state`), who watches whom
    (:attr:`scope`), and the hub methods that change them."""

    registry: GroupRegistry
    _: KW_ONLY
    state: OnlineState
    scope: WatchScope
    watch_limit: int
    complete: Complete
    count: Callable[[str, int], None]
    subscribed: Callable[[], Awaitable[object]] | None = None
    """Waits until this replica receives the groups its connections joined (the
    interest-routed backplane's subscriptions), so the state read after it misses nothing."""
    keys: KeyCodec = UUID_KEYS
    rate: WatchRate = field(default_factory=WatchRate)
    """``WatchPresence`` calls per user on this replica (:mod:`.watch_rate`)."""
    _busy: set[str] = field(default_factory=set, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    @property
    def watch_count(self) -> int:
        return self.scope.watch_count

    @property
    def member_chats_queries(self) -> int:
        return self.scope.member_chats_queries

    # connections --------------------------------------------------------------------------

    def connected(self, user_id: Key) -> None:
        self.state.connected(user_id)

    def leaving(self, connection_id: str, user_id: Key) -> None:
        """Before a connection is removed from the registry: its watches end; the user's grace
        starts if it was their last connection here."""
        self.scope.drop(connection_id)
        if self.registry.connection_count(user_id) <= 1:
            self.state.last_left(user_id)

    async def run(self) -> None:
        await self.state.run()

    # methods ------------------------------------------------------------------------------

    def watch(self, connection: HubConnection, invocation: Invocation) -> None:
        connection_id = connection.connection_id
        error: str | None = None
        ids: list[Key] | str = []
        # The cheap refusals first: a flood past the rate costs no parsing of its ids (500
        # UUIDs take milliseconds, the refusal microseconds).
        if connection_id in self._busy:
            error = BUSY
        elif (refused := self.rate.refusal(connection.user_id)) is not None:
            error = refused
        elif isinstance(
            ids := parse_ids(invocation.arguments, "WatchPresence", self.watch_limit, self.keys),
            str,
        ):
            error = ids
        else:
            added = self.scope.added(connection_id, ids)
            if self.scope.watches.get(connection_id, 0) + len(added) > self.watch_limit:
                error = OVER_LIMIT.format(method="WatchPresence", limit=self.watch_limit)
        if error is not None or isinstance(ids, str):
            self.count("refused", 1)
            self.complete(connection, invocation.invocation_id, error, None)
            return
        self._busy.add(connection_id)
        task = asyncio.create_task(self._watch(connection, invocation.invocation_id, ids))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(
        self, connection: HubConnection, invocation_id: str | None, ids: list[Key]
    ) -> None:
        connection_id = connection.connection_id
        try:
            allowed = await self.scope.allowed(connection_id, connection.user_id, ids)
            if connection_id not in self.registry:
                return  # closed meanwhile
            # No await since the decision: the watches start on the memberships it saw. The
            # ids asked again that may no longer be watched are dropped.
            kept = set(allowed)
            dropped = sum(
                self.scope.unwatch(connection_id, presence_group(u)) for u in ids if u not in kept
            )
            if dropped:
                self.count("unwatched", dropped)
            self.scope.add(connection_id, allowed)  # subscribed first: no change missed
            if self.subscribed is not None and allowed:
                await self.subscribed()
            states = await self.state.states(allowed)
            # A watch ended meanwhile (a removal, a block) is not answered either.
            in_group = self.registry.in_group
            allowed = [u for u in allowed if in_group(connection_id, presence_group(u))]
            self.count("watched", len(allowed))
            keys = self.keys
            result: JsonValue = [presence_entry(u, *states[u], keys) for u in allowed]
            self.complete(connection, invocation_id, None, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # PostgreSQL or Redis away: the caller may try again
            log.warning("hub_presence_watch_failed", error=type(exc).__name__)
            self.count("refused", 1)
            self.complete(connection, invocation_id, UNAVAILABLE, None)
        finally:
            self._busy.discard(connection_id)

    def unwatch(self, connection: HubConnection, invocation: Invocation) -> None:
        ids = parse_ids(invocation.arguments, "UnwatchPresence", self.watch_limit, self.keys)
        if isinstance(ids, str):
            self.count("refused", 1)
            self.complete(connection, invocation.invocation_id, ids, None)
            return
        dropped = 0
        for user_id in ids:
            dropped += self.scope.unwatch(connection.connection_id, presence_group(user_id))
        self.count("unwatched", dropped)
        self.complete(connection, invocation.invocation_id, None, None)

    # membership and blocks ----------------------------------------------------------------

    def membership_changed(self, user_id: Key, group: str, joined: bool) -> None:
        self.scope.membership_changed(user_id, group, joined)

    def hinted(self, user_id: Key) -> None:
        self.scope.hinted(user_id)

    def blocked(self, owner: Key, blocked: Key) -> None:
        ended = self.scope.blocked(owner, blocked)
        if ended:
            self.count("unwatched", ended)

    async def aclose(self) -> None:
        self.state.aclose()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.scope.aclose()
