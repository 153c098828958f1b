"""Who this replica holds online, and the announcements of their flips: :class:`OnlineState`.

A user is online here from their first connection until ``grace`` seconds after their last one
closed (a reconnect inside it changes nothing and writes nothing); ``lastSeenAt`` is when that
last connection closed. Across replicas a :class:`~.presence_store.RedisPresenceStore` decides
who announces; without one the process is the whole world and remembers ``lastSeenAt`` itself.

Announcements leave in batches from one task (:meth:`OnlineState.run`): a storm of flips costs
one script call per user that really changed, none for those back within the grace.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import structlog

from realtime_dispatch.hub.signals.wire_ids import user_id_json
from realtime_dispatch.hub.wire.protocol import invocation_frame
from realtime_dispatch.values.json_types import JsonValue
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

log = structlog.get_logger(__name__)

PRESENCE_CHANGED = "presence_changed"
PRESENCE_PREFIX = "presence:"
ANNOUNCE_BATCH = 500
SEEN_KEPT = 100_000
"""In process (no store): the users whose ``lastSeenAt`` is remembered, the latest gone."""

Publish = Callable[[Sequence[tuple[str, bytes]]], Awaitable[object]]


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


def iso_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def presence_entry(
    user_id: Key, online: bool, last_seen: str | None, keys: KeyCodec = UUID_KEYS
) -> JsonValue:
    """An entry of ``presence_changed`` and of ``WatchPresence``'s answer: the id as the key
    type shows it (a JSON number for bigint keys)."""
    return {"userId": user_id_json(user_id, keys), "online": online, "lastSeenAt": last_seen}


@dataclass(eq=False, kw_only=True)
class OnlineState:
    grace: float
    publish: Publish
    count: Callable[[str, int], None]
    store: PresenceStore | None
    keys: KeyCodec
    online: set[Key] = field(default_factory=set, init=False)
    """Users this replica holds online: with a connection here, or in their grace."""
    _in_grace: dict[Key, asyncio.TimerHandle] = field(default_factory=dict, init=False)
    _seen: dict[Key, str] = field(default_factory=dict, init=False)
    """``lastSeenAt`` of users this replica saw go (in process, without a store), the longest
    gone first."""
    flips: dict[Key, str | None] = field(default_factory=dict, init=False)
    """Transitions to announce: None online, else offline with that ``lastSeenAt``."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def connected(self, user_id: Key) -> None:
        timer = self._in_grace.pop(user_id, None)
        if timer is not None:
            timer.cancel()  # back within the grace: nothing changed
        elif user_id not in self.online:
            self.online.add(user_id)
            self._flip(user_id, None)

    def last_left(self, user_id: Key) -> None:
        """The user's last connection here is closing: their grace starts."""
        if user_id in self.online and user_id not in self._in_grace:
            loop = asyncio.get_running_loop()
            self._in_grace[user_id] = loop.call_later(self.grace, self._gone, user_id, iso_now())

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
        self.flips[user_id] = seen
        self._wake.set()

    async def states(self, users: list[Key]) -> dict[Key, tuple[bool, str | None]]:
        if self.store is not None:
            return await self.store.states(users)
        return {u: (u in self.online, self._seen.get(u)) for u in users}

    def _frames(self, changes: Sequence[tuple[Key, bool, str | None]]) -> list[tuple[str, bytes]]:
        keys = self.keys
        return [
            (presence_group(u), invocation_frame(PRESENCE_CHANGED, [presence_entry(u, o, s, keys)]))
            for u, o, s in changes
        ]

    async def run(self) -> None:
        """Announce the flips as they come; with a store, keep this replica's claims alive."""
        refresher = None
        if self.store is not None:
            refresher = asyncio.create_task(self._keep(self.store), name="hub-presence-keep")
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self.drain()
        finally:
            if refresher is not None:  # ended with the hub, not left cancelling behind it
                refresher.cancel()
                await asyncio.wait([refresher])

    async def drain(self) -> None:
        """Announce the flips waiting, in batches."""
        while self.flips:
            batch = dict(list(self.flips.items())[:ANNOUNCE_BATCH])
            for user_id in batch:
                del self.flips[user_id]
            await self._announce(batch)

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
                self.count("dropped", len(batch))
                log.warning("hub_presence_store_failed", error=type(exc).__name__)
                return
            off = [(u, seen) for u, seen in went_off if u in offline]
        frames = self._frames([(u, True, s) for u, s in on.items()])
        frames += self._frames([(u, False, s) for u, s in off])
        if frames:
            await self.publish(frames)
        self.count("online", len(on))
        self.count("offline", len(off))

    async def _keep(self, store: PresenceStore) -> None:
        while True:
            await asyncio.sleep(store.refresh)
            try:
                await store.keep(set(self.online))
                # The users of replicas that died without closing: announced offline here
                # (by whichever live replica takes each dead one's sweep).
                gone = await store.sweep()
                if gone:
                    await self.publish(self._frames([(u, False, seen) for u, seen in gone]))
                    self.count("swept", len(gone))
            except Exception as exc:  # retried at the next refresh; claims outlive three
                log.warning("hub_presence_keep_failed", error=type(exc).__name__)

    def aclose(self) -> None:
        for timer in self._in_grace.values():
            timer.cancel()
        self._in_grace.clear()
