"""Who a connection may watch, and its watches: :class:`WatchScope`.

* **A watch is a group**, ``presence:{userId}``, in the hub's registry: an announcement is a
  push to that group, published like any other.
* **Shares a chat**: the ids a caller may watch are those whose active chats (the manifest's
  ``member_chats``, the one query the hub runs on connect, here for the watched ids) meet the
  caller's own chat groups; on the reference messenger, users who blocked the caller are left
  out too. The chats of the watched users are kept while someone here watches them.
* **Consent** (``consent``, the manifest's ``presence_chats``): a watched user's chats are only
  those they took part in (the reference messenger: created, read in, or sent to), so a chat
  made by the caller alone, with a stranger in it, shows nothing of the stranger.
* **Live**: a membership change (:meth:`WatchScope.membership_changed`) ends the watches whose
  two users no longer share a chat. A membership hint ("read this user again") for a watched
  user with no connection here is read here (:meth:`WatchScope.hinted`; the feed reads only
  connected users), and with ``consent`` a connected one too (the messenger hints a user's first
  read or send in a chat). A block made after a watch started (:meth:`WatchScope.blocked`) ends the
  blocked user's watches on the blocker.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Collection
from dataclasses import KW_ONLY, dataclass, field

import structlog

from realtime_dispatch.hub.connections.registry import CHAT_PREFIX, GroupRegistry, chat_group
from realtime_dispatch.hub.signals.presence_online import PRESENCE_PREFIX, presence_group
from realtime_dispatch.hub.signals.wire_ids import parse_key
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

log = structlog.get_logger(__name__)

MemberChats = Callable[[list[Key]], Awaitable[list[tuple[Key, Key]]]]
"""``member_chats(users)`` → ``(user_id, chat_id)`` of their active memberships."""
Blockers = Callable[[Key, list[Key]], Awaitable[Collection[Key]]]
"""``blockers(caller, users)`` → those of ``users`` who blocked ``caller``."""
REREAD_BATCH = 500


def user_of_group(group: str, keys: KeyCodec = UUID_KEYS) -> Key | None:
    """The watched user of a ``presence:`` group."""
    return parse_key(group[len(PRESENCE_PREFIX) :], keys)


@dataclass(eq=False)
class WatchScope:
    registry: GroupRegistry
    _: KW_ONLY
    member_chats: MemberChats
    blockers: Blockers | None
    keys: KeyCodec = UUID_KEYS
    consent: bool = False
    """``member_chats`` is the manifest's ``presence_chats``: the chats a user took part in,
    not all their memberships. A chat a watched user joins then shows nothing until it is
    read again (being added is not consent); a chat left still ends the watches at once."""
    watches: dict[str, int] = field(default_factory=dict, init=False)
    """Watched users per connection."""
    watch_count: int = field(default=0, init=False)
    _chats: dict[Key, set[str]] = field(default_factory=dict, init=False)
    """Active chats (as group names) of the watched users, while someone here watches them."""
    _loads: list[list[tuple[Key, str, bool]]] = field(default_factory=list, init=False)
    member_chats_queries: int = field(default=0, init=False)
    """``member_chats`` queries run here (ids nobody here watched yet, hinted ones)."""
    _hinted: dict[Key, None] = field(default_factory=dict, init=False)
    _rereader: asyncio.Task[None] | None = field(default=None, init=False)
    _pending: dict[Key, int] = field(default_factory=dict, init=False)
    """Users an :meth:`allowed` is deciding on now: their kept chats stay meanwhile."""
    _blocks_heard: list[list[tuple[Key, Key]]] = field(default_factory=list, init=False)
    """The blocks heard while an :meth:`allowed` waits (its blacklist answer may predate them)."""

    # watches ------------------------------------------------------------------------------

    def added(self, connection_id: str, users: list[Key]) -> list[Key]:
        """Of ``users``, those the connection does not watch yet."""
        in_group = self.registry.in_group
        return [u for u in users if not in_group(connection_id, presence_group(u))]

    def add(self, connection_id: str, users: list[Key]) -> None:
        for user_id in users:
            group = presence_group(user_id)
            if not self.registry.in_group(connection_id, group):
                self.registry.join(connection_id, group)
                self.watches[connection_id] = self.watches.get(connection_id, 0) + 1
                self.watch_count += 1

    def drop(self, connection_id: str) -> None:
        """Before a connection is removed from the registry: its watches end."""
        if self.watches.get(connection_id):
            for group in self.registry.groups_of(connection_id):
                if group.startswith(PRESENCE_PREFIX):
                    self.unwatch(connection_id, group)
        self.watches.pop(connection_id, None)

    def unwatch(self, connection_id: str, group: str) -> int:
        if not self.registry.in_group(connection_id, group):
            return 0
        self.registry.leave(connection_id, group)
        self.watches[connection_id] -= 1
        self.watch_count -= 1
        if not self.registry.members(group):
            user_id = user_of_group(group, self.keys)
            if user_id is not None and not self._pending.get(user_id):
                self._chats.pop(user_id, None)
        return 1

    # shares a chat ------------------------------------------------------------------------

    async def allowed(self, connection_id: str, caller: Key, ids: list[Key]) -> list[Key]:
        """Of ``ids``, those sharing an active chat with the caller (and, with ``blockers``,
        who did not block the caller); their chats are kept for the live checks.

        Decided after the last await, against the memberships as they are then (a removal or
        a block applied while the queries ran counts: there is no watch yet for it to end),
        and returned without another await, so the caller adds the watches at once."""
        pending = self._pending
        for user_id in ids:
            pending[user_id] = pending.get(user_id, 0) + 1
        blocks: list[tuple[Key, Key]] = []
        self._blocks_heard.append(blocks)
        unknown = [u for u in ids if u not in self._chats]
        try:
            if unknown:
                for user_id, chats in (await self._load(unknown)).items():
                    self._chats.setdefault(user_id, chats)
            candidates = self._sharing(connection_id, ids)
            blocked: set[Key] = set()
            if candidates and self.blockers is not None:
                blocked = set(await self.blockers(caller, candidates))
            blocked.update(owner for owner, who in blocks if who == caller)
            # The last await is behind: the memberships as they are now decide.
            sharing = set(self._sharing(connection_id, candidates))
            allowed = [u for u in candidates if u in sharing and u not in blocked]
        finally:
            self._blocks_heard.remove(blocks)
            for user_id in ids:
                pending[user_id] -= 1
                if not pending[user_id]:
                    del pending[user_id]
        for user_id in set(unknown) - set(allowed):  # nobody here watches them (yet)
            if not self.registry.members(presence_group(user_id)) and user_id not in pending:
                self._chats.pop(user_id, None)
        return allowed

    def _sharing(self, connection_id: str, ids: list[Key]) -> list[Key]:
        """Of ``ids``, those whose kept chats meet the connection's chat groups now."""
        mine = self._chat_groups(connection_id)
        chats = self._chats
        return [u for u in ids if u in chats and not chats[u].isdisjoint(mine)]

    async def _load(self, users: list[Key]) -> dict[Key, set[str]]:
        """The users' active chats, as group names (so the chats' key type does not matter);
        the changes heard during the query win over its answer."""
        changes: list[tuple[Key, str, bool]] = []
        self._loads.append(changes)
        self.member_chats_queries += 1
        try:
            rows = await self.member_chats(users)
        finally:
            self._loads.remove(changes)
        loaded: dict[Key, set[str]] = {u: set() for u in users}
        for user_id, chat_id in rows:
            loaded.setdefault(user_id, set()).add(chat_group(chat_id))
        for user_id, group, joined in changes:
            if user_id in loaded and not (joined and self.consent):
                (loaded[user_id].add if joined else loaded[user_id].discard)(group)
        return loaded

    def _chat_groups(self, connection_id: str) -> set[str]:
        return {g for g in self.registry.groups_of(connection_id) if g.startswith(CHAT_PREFIX)}

    # live changes -------------------------------------------------------------------------

    def membership_changed(self, user_id: Key, group: str, joined: bool) -> None:
        """After the registry applied a change (live, or a snapshot's): keep the watched users'
        chats, and end the watches whose two users no longer share one."""
        for load in self._loads:
            load.append((user_id, group, joined))
        chats = self._chats.get(user_id)
        if chats is not None and not (joined and self.consent):
            (chats.add if joined else chats.discard)(group)
        if joined:
            return
        registry = self.registry
        if chats is not None:
            self._end_unshared(user_id, chats)
        # The user's own watches.
        for connection_id in registry.connections_of(user_id):
            if not self.watches.get(connection_id):
                continue
            mine = self._chat_groups(connection_id)
            for watched in registry.groups_of(connection_id):
                if not watched.startswith(PRESENCE_PREFIX):
                    continue
                other = user_of_group(watched, self.keys)
                theirs = self._chats.get(other) if other is not None else None
                if theirs is None or theirs.isdisjoint(mine):
                    self.unwatch(connection_id, watched)

    def _end_unshared(self, user_id: Key, chats: set[str]) -> None:
        """Those watching ``user_id``: the watches of those who share none of ``chats`` end."""
        watchers = presence_group(user_id)
        for connection_id in self.registry.members(watchers):
            if chats.isdisjoint(self._chat_groups(connection_id)):
                self.unwatch(connection_id, watchers)

    def hinted(self, user_id: Key) -> None:
        """A membership hint for ``user_id`` (its chats changed, read them again). The feed
        reads the users connected here; a watched user who is not is read here. With
        ``consent`` a watched user is read here either way: the feed's chats are all their
        memberships, and the hint may say they took part in one (a first read or send)."""
        if self.registry.connection_count(user_id) and not self.consent:
            return
        if user_id not in self._chats and not self._loads:
            return  # nobody here watches them, nor is about to
        self._hinted[user_id] = None
        if self._rereader is None:
            self._rereader = asyncio.create_task(self._reread(), name="hub-presence-hints")

    async def _reread(self) -> None:
        try:
            while self._hinted:
                users = list(itertools.islice(self._hinted, REREAD_BATCH))
                for user_id in users:
                    del self._hinted[user_id]
                for user_id, chats in (await self._load(users)).items():
                    if user_id not in self._chats or user_id in self._hinted:
                        continue  # nobody here watches them any more; hinted again meanwhile
                    self._chats[user_id] = chats
                    self._end_unshared(user_id, chats)
        except Exception as exc:  # PostgreSQL away: what is kept goes, read again at the next watch
            log.warning("hub_presence_hint_failed", error=type(exc).__name__)
            self._forget_unconnected()
        finally:
            self._rereader = None

    def _forget_unconnected(self) -> None:
        """The kept chats of users with no connection here can no longer be trusted: their
        watches end (a client's next ``WatchPresence`` reads them again)."""
        self._hinted.clear()
        for user_id in [u for u in self._chats if not self.registry.connection_count(u)]:
            group = presence_group(user_id)
            for connection_id in self.registry.members(group):
                self.unwatch(connection_id, group)
            self._chats.pop(user_id, None)

    def blocked(self, owner: Key, blocked: Key) -> int:
        """``owner`` blocked ``blocked``: the watches of ``blocked``'s connections here on
        ``owner`` end (the blocked user is not told). Returns how many ended."""
        for heard in self._blocks_heard:
            heard.append((owner, blocked))
        group = presence_group(owner)
        return sum(self.unwatch(c, group) for c in self.registry.connections_of(blocked))

    async def aclose(self) -> None:
        if self._rereader is not None:
            self._rereader.cancel()
            await asyncio.gather(self._rereader, return_exceptions=True)
