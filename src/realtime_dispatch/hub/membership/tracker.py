"""Chat membership → ``chat:{chatId}`` groups: :class:`MembershipTracker`. Pure.

Two sources feed it: snapshots read by the manifest's ``member_chats`` (on connect, and after the
membership feed reconnects) and live changes (``realtime_membership`` notifications). A change
can arrive while a snapshot query is in flight, and the snapshot may or may not already contain
it. A change that carries the absolute state (``active`` true or false) is recorded in every
load in flight and wins over its snapshot.

A change without ``active`` is a hint: "this user's memberships changed, read them again". The
feed re-reads that user (a load begun after the hint, so its snapshot has the change) and the
loads already in flight leave the user alone (:meth:`MembershipTracker.hint`): what they read
may predate the change, and the re-read that follows sets the user's every connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import orjson

from realtime_dispatch.hub.connections.registry import CHAT_PREFIX, GroupRegistry, chat_group
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec


@dataclass(frozen=True, slots=True)
class MembershipChange:
    chat_id: Key
    user_id: Key
    active: bool | None = None
    """``None``: a hint (the user's ``member_chats`` are read again), else the absolute state."""


def parse_change(payload: str, keys: KeyCodec = UUID_KEYS) -> MembershipChange | None:
    """A ``realtime_membership`` notification payload, its ids of type ``keys`` (a JSON
    number or decimal string for bigint); None when it is not one. Without ``active`` (or with
    ``null``) it is a hint."""
    try:
        value = orjson.loads(payload)
        if not isinstance(value, dict):
            return None
        active = value.get("active")
        if active is not None and not isinstance(active, bool):
            return None
        chat_id, user_id = keys.from_json(value["chatId"]), keys.from_json(value["userId"])
        return MembershipChange(chat_id, user_id, active)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


class MembershipTracker:
    __slots__ = ("_ids", "_loads", "_registry", "_stale", "on_change", "on_hint")

    def __init__(self, registry: GroupRegistry) -> None:
        self._registry = registry
        self.on_change: Callable[[Key, str, bool], None] | None = None
        """Told ``(user, chat group, joined)`` for each chat a user with connections here joined
        or left, by a live change or by a snapshot (a hint's re-read, a resync)."""
        self.on_hint: Callable[[Key], None] | None = None
        """Told of every hint (presence reads the watched users not connected here)."""
        self._loads: dict[int, dict[tuple[Key, Key], bool]] = {}
        self._stale: dict[int, set[Key]] = {}  # per load: users hinted while it ran
        self._ids = itertools.count(1)

    def begin_load(self) -> int:
        """Call before the snapshot query starts; pass the token to :meth:`finish_load`."""
        token = next(self._ids)
        self._loads[token] = {}
        self._stale[token] = set()
        return token

    def cancel_load(self, token: int) -> None:
        self._loads.pop(token, None)
        self._stale.pop(token, None)

    def hint(self, user_id: Key) -> bool:
        """A hint for ``user_id``: the loads in flight will leave that user alone. True when the
        user has connections here, and so must be read again (by a load begun after now)."""
        for stale in self._stale.values():
            stale.add(user_id)
        if self.on_hint is not None:
            self.on_hint(user_id)
        return self._registry.connection_count(user_id) > 0

    def apply(self, change: MembershipChange) -> None:
        if change.active is None:
            raise ValueError("a hint is not applied: the feed reads the user again")
        for changes in self._loads.values():
            changes[(change.user_id, change.chat_id)] = change.active
        group = chat_group(change.chat_id)
        for connection_id in self._registry.connections_of(change.user_id):
            if change.active:
                self._registry.join(connection_id, group)
            else:
                self._registry.leave(connection_id, group)
        if self.on_change is not None:
            self.on_change(change.user_id, group, change.active)

    def finish_load(
        self,
        token: int,
        active_rows: Iterable[tuple[Key, Key]],
        *,
        users: Collection[Key],
        connections: Collection[str] | None = None,
    ) -> None:
        """Apply a snapshot: ``active_rows`` are ``(user_id, chat_id)`` active memberships of
        ``users``. It sets the chat groups of ``connections`` (default: every connection of
        ``users``). A user hinted while it ran is left out: a later load sets that user."""
        changes = self._loads.pop(token, {})
        stale = self._stale.pop(token, set())
        chats: dict[Key, set[Key]] = {user: set() for user in users if user not in stale}
        for user, chat in active_rows:
            if user not in stale:
                chats.setdefault(user, set()).add(chat)
        for (user, chat), active in changes.items():
            if user in chats:
                if active:
                    chats[user].add(chat)
                else:
                    chats[user].discard(chat)
        targets = (
            connections
            if connections is not None
            else [c for user in users for c in self._registry.connections_of(user)]
        )
        before: dict[Key, frozenset[str]] = {}
        for connection_id in targets:
            owner = self._registry.user_of(connection_id)
            if owner is None or owner not in chats:
                continue
            if owner not in before:
                before[owner] = self._chat_groups(connection_id)
            self._registry.set_groups_with_prefix(
                connection_id, CHAT_PREFIX, (chat_group(chat) for chat in chats[owner])
            )
        if self.on_change is not None:
            for owner, old in before.items():
                now = {chat_group(chat) for chat in chats[owner]}
                for group in now - old:
                    self.on_change(owner, group, True)
                for group in old - now:
                    self.on_change(owner, group, False)

    def _chat_groups(self, connection_id: str) -> frozenset[str]:
        return frozenset(
            g for g in self._registry.groups_of(connection_id) if g.startswith(CHAT_PREFIX)
        )
