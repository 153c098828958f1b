"""Presence: ``WatchPresence(userIds)`` / ``UnwatchPresence(userIds)`` and ``presence_changed``
``{userId, online, lastSeenAt}``, scoped to the people a caller shares a chat with.

* **Online** while a user has a connection on any replica; offline ``grace`` seconds after the
  last one closed (a reconnect inside it changes nothing and writes nothing); ``lastSeenAt`` is
  when that last connection closed. This replica keeps its own users' state (:attr:`online`,
  one timer per user in grace); across replicas a :class:`~.presence_store.RedisPresenceStore`
  decides who announces. Without a backplane the process is the whole world.
* **A watch is a group**, ``presence:{userId}``, in the hub's registry: an announcement is a
  push to that group, published like any other (in process, or through the backplane, where the
  interest-routed one subscribes a replica only to the users its connections watch).
* **Shares a chat**: the ids a caller may watch are those whose active chats (the manifest's
  ``member_chats``, the one query the hub runs on connect, here for the watched ids) meet the
  caller's own chat groups; on the reference messenger, users who blocked the caller are left
  out too. Membership changes apply live (:meth:`Presence.membership_changed`): a watch whose
  two users no longer share a chat ends.

Announcements leave in batches from one task (:meth:`Presence.run`): a storm of flips costs one
script call per user that really changed, none for those back within the grace.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

import structlog

from realtime_dispatch.hub.connections.registry import CHAT_PREFIX, GroupRegistry, chat_group
from realtime_dispatch.hub.signals.wire_ids import parse_user_id, user_id_json
from realtime_dispatch.hub.wire.protocol import Invocation, invocation_frame
from realtime_dispatch.keys import Key
from realtime_dispatch.push import JsonValue

if TYPE_CHECKING:
    from realtime_dispatch.hub.connections.connection import HubConnection

log = structlog.get_logger(__name__)

PRESENCE_CHANGED = "presence_changed"
PRESENCE_PREFIX = "presence:"
BAD_ARGUMENTS = "{method} takes one argument: a list of user ids."
OVER_LIMIT = "{method} refused: at most {limit} watched users per connection."
BUSY = "WatchPresence refused: the previous WatchPresence has not completed."
UNAVAILABLE = "WatchPresence failed: presence is unavailable, try again."
ANNOUNCE_BATCH = 500
SEEN_KEPT = 100_000
"""In process (no store): the users whose ``lastSeenAt`` is remembered, the latest gone."""

MemberChats = Callable[[list[Key]], Awaitable[list[tuple[Key, Key]]]]
"""``member_chats(users)`` → ``(user_id, chat_id)`` of their active memberships."""
Blockers = Callable[[Key, list[Key]], Awaitable[Collection[Key]]]
"""``blockers(caller, users)`` → those of ``users`` who blocked ``caller``."""
Publish = Callable[[Sequence[tuple[str, bytes]]], Awaitable[object]]
Complete = Callable[["HubConnection", str | None, str | None, JsonValue], None]


class PresenceStore(Protocol):
    refresh: float

    async def went_online(self, users: Sequence[Key]) -> dict[Key, str | None]: ...

    async def went_offline(self, users: Sequence[tuple[Key, str]]) -> list[Key]: ...

    async def sweep(self) -> list[tuple[Key, str]]: ...

    async def keep(self, users: Collection[Key]) -> None: ...

    async def states(self, users: Sequence[Key]) -> dict[Key, tuple[bool, str | None]]: ...


def presence_group(user_id: Key) -> str:
    """The watchers' group of a user; interned, so that its thousands of watches share one
    string (a third of a watch's memory otherwise)."""
    return sys.intern(f"{PRESENCE_PREFIX}{user_id}")


def _user_of_group(group: str) -> Key | None:
    return parse_user_id(group[len(PRESENCE_PREFIX) :])


def iso_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def presence_entry(user_id: Key, online: bool, last_seen: str | None) -> JsonValue:
    return {"userId": user_id_json(user_id), "online": online, "lastSeenAt": last_seen}


def parse_ids(arguments: tuple[JsonValue, ...], method: str, limit: int) -> list[Key] | str:
    """The distinct user ids of a ``WatchPresence`` / ``UnwatchPresence``, in order, or the
    error to answer: not one list of ids, or a list longer than ``limit`` (not read further)."""
    if len(arguments) != 1 or not isinstance(arguments[0], list):
        return BAD_ARGUMENTS.format(method=method)
    raw = arguments[0]
    if len(raw) > limit:
        return OVER_LIMIT.format(method=method, limit=limit)
    ids: dict[Key, None] = {}
    for entry in raw:
        user_id = parse_user_id(entry)
        if user_id is None:
            return BAD_ARGUMENTS.format(method=method)
        ids[user_id] = None
    return list(ids)


class Presence:
    def __init__(
        self,
        registry: GroupRegistry,
        *,
        grace: float,
        watch_limit: int,
        member_chats: MemberChats,
        publish: Publish,
        complete: Complete,
        count: Callable[[str, int], None],
        blockers: Blockers | None = None,
        store: PresenceStore | None = None,
        subscribed: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._registry = registry
        self._grace = grace
        self.watch_limit = watch_limit
        self._member_chats = member_chats
        self._blockers = blockers
        self._publish = publish
        self._complete = complete
        self._count = count
        self.store = store
        self._subscribed = subscribed
        """Waits until this replica receives the groups its connections joined (the
        interest-routed backplane's subscriptions), so the state read after it misses nothing."""
        self.online: set[Key] = set()
        """Users this replica holds online: with a connection here, or in their grace."""
        self._in_grace: dict[Key, asyncio.TimerHandle] = {}
        self._seen: dict[Key, str] = {}
        """``lastSeenAt`` of users this replica saw go (in process, without a store), the
        longest gone first."""
        self._flips: dict[Key, str | None] = {}
        """Transitions to announce: None online, else offline with that ``lastSeenAt``."""
        self._wake = asyncio.Event()
        self.watches: dict[str, int] = {}
        """Watched users per connection."""
        self.watch_count = 0
        self._chats: dict[Key, set[str]] = {}
        """Active chats of the watched users (while someone here watches them)."""
        self._loads: list[list[tuple[Key, str, bool]]] = []
        self._busy: set[str] = set()
        self.member_chats_queries = 0
        """``member_chats`` queries run for ``WatchPresence`` (ids nobody here watched yet)."""
        self._tasks: set[asyncio.Task[None]] = set()

    # connections --------------------------------------------------------------------------

    def connected(self, user_id: Key) -> None:
        timer = self._in_grace.pop(user_id, None)
        if timer is not None:
            timer.cancel()  # back within the grace: nothing changed
        elif user_id not in self.online:
            self.online.add(user_id)
            self._flip(user_id, None)

    def leaving(self, connection_id: str, user_id: Key) -> None:
        """Before a connection is removed from the registry: its watches end; the user's grace
        starts if it was their last connection here."""
        if self.watches.get(connection_id):
            for group in self._registry.groups_of(connection_id):
                if group.startswith(PRESENCE_PREFIX):
                    self._unwatch(connection_id, group)
        self.watches.pop(connection_id, None)
        if self._registry.connection_count(user_id) <= 1 and user_id in self.online:
            loop = asyncio.get_running_loop()
            seen = iso_now()
            self._in_grace[user_id] = loop.call_later(self._grace, self._gone, user_id, seen)

    def _gone(self, user_id: Key, seen: str) -> None:
        del self._in_grace[user_id]
        self.online.discard(user_id)
        if self.store is None:  # in process, this is the only record of it (a store keeps it)
            self._seen.pop(user_id, None)
            self._seen[user_id] = seen
            if len(self._seen) > SEEN_KEPT:
                del self._seen[next(iter(self._seen))]  # the longest gone
        self._flip(user_id, seen)

    def _flip(self, user_id: Key, seen: str | None) -> None:
        self._flips[user_id] = seen
        self._wake.set()

    # announcements ------------------------------------------------------------------------

    async def run(self) -> None:
        """Announce the flips as they come; with a store, keep this replica's claims alive."""
        refresher = None
        if self.store is not None:
            refresher = asyncio.create_task(self._keep(self.store), name="hub-presence-keep")
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._flips:
                    batch = dict(list(self._flips.items())[:ANNOUNCE_BATCH])
                    for user_id in batch:
                        del self._flips[user_id]
                    await self._announce(batch)
        finally:
            if refresher is not None:
                refresher.cancel()

    async def _announce(self, batch: dict[Key, str | None]) -> None:
        went_on = [u for u, seen in batch.items() if seen is None]
        went_off = [(u, seen) for u, seen in batch.items() if seen is not None]
        on: dict[Key, str | None] = {u: self._seen.get(u) for u in went_on}
        off: list[tuple[Key, str]] = went_off
        if self.store is not None:
            try:
                on = await self.store.went_online(went_on) if went_on else {}
                offline = set(await self.store.went_offline(went_off)) if went_off else set()
            except Exception as exc:  # the store is Redis: nothing to retry, counted and logged
                self._count("dropped", len(batch))
                log.warning("hub_presence_store_failed", error=type(exc).__name__)
                return
            off = [(u, seen) for u, seen in went_off if u in offline]
        frames = [
            (presence_group(u), invocation_frame(PRESENCE_CHANGED, [presence_entry(u, True, s)]))
            for u, s in on.items()
        ] + [
            (presence_group(u), invocation_frame(PRESENCE_CHANGED, [presence_entry(u, False, s)]))
            for u, s in off
        ]
        if frames:
            await self._publish(frames)
        self._count("online", len(on))
        self._count("offline", len(off))

    async def _keep(self, store: PresenceStore) -> None:
        while True:
            await asyncio.sleep(store.refresh)
            try:
                await store.keep(set(self.online))
                # The users of replicas that died without closing: announced offline here
                # (by whichever live replica takes each dead one's sweep).
                gone = await store.sweep()
                if gone:
                    frames = [
                        (
                            presence_group(u),
                            invocation_frame(PRESENCE_CHANGED, [presence_entry(u, False, seen)]),
                        )
                        for u, seen in gone
                    ]
                    await self._publish(frames)
                    self._count("swept", len(gone))
            except Exception as exc:  # retried at the next refresh; claims outlive three
                log.warning("hub_presence_keep_failed", error=type(exc).__name__)

    # methods ------------------------------------------------------------------------------

    def watch(self, connection: HubConnection, invocation: Invocation) -> None:
        ids = parse_ids(invocation.arguments, "WatchPresence", self.watch_limit)
        connection_id = connection.connection_id
        error: str | None = None
        if isinstance(ids, str):
            error = ids
        elif connection_id in self._busy:
            error = BUSY
        else:
            added = [
                u for u in ids if not self._registry.in_group(connection_id, presence_group(u))
            ]
            if self.watches.get(connection_id, 0) + len(added) > self.watch_limit:
                error = OVER_LIMIT.format(method="WatchPresence", limit=self.watch_limit)
        if error is not None or isinstance(ids, str):
            self._count("refused", 1)
            self._complete(connection, invocation.invocation_id, error, None)
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
            allowed = await self._shared(connection_id, connection.user_id, ids)
            if connection_id not in self._registry:
                return  # closed meanwhile
            for user_id in allowed:  # subscribed first: no change between answer and events
                group = presence_group(user_id)
                if not self._registry.in_group(connection_id, group):
                    self._registry.join(connection_id, group)
                    self.watches[connection_id] = self.watches.get(connection_id, 0) + 1
                    self.watch_count += 1
            if self._subscribed is not None and allowed:
                await self._subscribed()
            states = await self._states(allowed)
            self._count("watched", len(allowed))
            result: JsonValue = [presence_entry(u, *states[u]) for u in allowed]
            self._complete(connection, invocation_id, None, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # PostgreSQL or Redis away: the caller may try again
            log.warning("hub_presence_watch_failed", error=type(exc).__name__)
            self._count("refused", 1)
            self._complete(connection, invocation_id, UNAVAILABLE, None)
        finally:
            self._busy.discard(connection_id)

    def unwatch(self, connection: HubConnection, invocation: Invocation) -> None:
        ids = parse_ids(invocation.arguments, "UnwatchPresence", self.watch_limit)
        if isinstance(ids, str):
            self._count("refused", 1)
            self._complete(connection, invocation.invocation_id, ids, None)
            return
        dropped = 0
        for user_id in ids:
            dropped += self._unwatch(connection.connection_id, presence_group(user_id))
        self._count("unwatched", dropped)
        self._complete(connection, invocation.invocation_id, None, None)

    def _unwatch(self, connection_id: str, group: str) -> int:
        if not self._registry.in_group(connection_id, group):
            return 0
        self._registry.leave(connection_id, group)
        self.watches[connection_id] -= 1
        self.watch_count -= 1
        if not self._registry.members(group):
            user_id = _user_of_group(group)
            if user_id is not None:
                self._chats.pop(user_id, None)
        return 1

    async def _shared(self, connection_id: str, caller: Key, ids: list[Key]) -> list[Key]:
        """Of ``ids``, those sharing an active chat with the caller (and, with ``blockers``,
        who did not block the caller); their chats are kept for the live checks."""
        unknown = [u for u in ids if u not in self._chats]
        if unknown:
            changes: list[tuple[Key, str, bool]] = []
            self._loads.append(changes)  # changes during the query win over its answer
            self.member_chats_queries += 1
            try:
                rows = await self._member_chats(unknown)
            finally:
                self._loads.remove(changes)
            # Compared as group names, so the chats' key type does not matter here.
            loaded: dict[Key, set[str]] = {u: set() for u in unknown}
            for user_id, chat_id in rows:
                loaded.setdefault(user_id, set()).add(chat_group(chat_id))
            for user_id, group, joined in changes:
                if user_id in loaded:
                    (loaded[user_id].add if joined else loaded[user_id].discard)(group)
            for user_id, chats in loaded.items():
                self._chats.setdefault(user_id, chats)
        mine = self._chat_groups(connection_id)
        allowed = [u for u in ids if u in self._chats and not self._chats[u].isdisjoint(mine)]
        if allowed and self._blockers is not None:
            blocked = set(await self._blockers(caller, allowed))
            allowed = [u for u in allowed if u not in blocked]
        for user_id in set(unknown) - set(allowed):  # nobody here watches them (yet)
            if not self._registry.members(presence_group(user_id)):
                self._chats.pop(user_id, None)
        return allowed

    def _chat_groups(self, connection_id: str) -> set[str]:
        return {g for g in self._registry.groups_of(connection_id) if g.startswith(CHAT_PREFIX)}

    async def _states(self, users: list[Key]) -> dict[Key, tuple[bool, str | None]]:
        if self.store is not None:
            return await self.store.states(users)
        return {u: (u in self.online, self._seen.get(u)) for u in users}

    # membership ---------------------------------------------------------------------------

    def membership_changed(self, user_id: Key, group: str, joined: bool) -> None:
        """After the registry applied a change (live, or a snapshot's): keep the watched users'
        chats, and end the watches whose two users no longer share one."""
        for load in self._loads:
            load.append((user_id, group, joined))
        chats = self._chats.get(user_id)
        if chats is not None:
            (chats.add if joined else chats.discard)(group)
        if joined:
            return
        registry = self._registry
        # Those watching the user: do they still share a chat?
        watchers = presence_group(user_id)
        if chats is not None:
            for connection_id in registry.members(watchers):
                if chats.isdisjoint(self._chat_groups(connection_id)):
                    self._unwatch(connection_id, watchers)
        # The user's own watches.
        for connection_id in registry.connections_of(user_id):
            if not self.watches.get(connection_id):
                continue
            mine = self._chat_groups(connection_id)
            for watched in registry.groups_of(connection_id):
                if not watched.startswith(PRESENCE_PREFIX):
                    continue
                other = _user_of_group(watched)
                theirs = self._chats.get(other) if other is not None else None
                if theirs is None or theirs.isdisjoint(mine):
                    self._unwatch(connection_id, watched)

    async def aclose(self) -> None:
        for timer in self._in_grace.values():
            timer.cancel()
        self._in_grace.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
