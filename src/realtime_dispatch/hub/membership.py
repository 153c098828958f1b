"""Chat membership → ``chat:{chatId}`` groups: :class:`MembershipTracker`. Pure.

Two sources feed it: snapshots read by the manifest's ``member_chats`` (on connect, and after the
membership feed reconnects) and live changes (``realtime_membership`` notifications). A change
can arrive while a snapshot query is in flight, and the snapshot may or may not already contain
it. Each change carries the absolute state (active or not), so the rule is simple: changes seen
after a load began are recorded in that load and win over its snapshot.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import orjson

from realtime_dispatch.hub.registry import CHAT_PREFIX, GroupRegistry, chat_group
from realtime_dispatch.keys import UUID_KEYS, Key, KeyCodec


@dataclass(frozen=True, slots=True)
class MembershipChange:
    chat_id: Key
    user_id: Key
    active: bool


def parse_change(payload: str, keys: KeyCodec = UUID_KEYS) -> MembershipChange | None:
    """A ``realtime_membership`` notification payload, its ids of type ``keys`` (a JSON
    number or decimal string for bigint); None when it is not one."""
    try:
        value = orjson.loads(payload)
        if not isinstance(value, dict) or not isinstance(value.get("active"), bool):
            return None
        chat_id, user_id = keys.from_json(value["chatId"]), keys.from_json(value["userId"])
        return MembershipChange(chat_id, user_id, value["active"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


class MembershipTracker:
    __slots__ = ("_ids", "_loads", "_registry")

    def __init__(self, registry: GroupRegistry) -> None:
        self._registry = registry
        self._loads: dict[int, dict[tuple[Key, Key], bool]] = {}
        self._ids = itertools.count(1)

    def begin_load(self) -> int:
        """Call before the snapshot query starts; pass the token to :meth:`finish_load`."""
        token = next(self._ids)
        self._loads[token] = {}
        return token

    def cancel_load(self, token: int) -> None:
        self._loads.pop(token, None)

    def apply(self, change: MembershipChange) -> None:
        for changes in self._loads.values():
            changes[(change.user_id, change.chat_id)] = change.active
        group = chat_group(change.chat_id)
        for connection_id in self._registry.connections_of(change.user_id):
            if change.active:
                self._registry.join(connection_id, group)
            else:
                self._registry.leave(connection_id, group)

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
        ``users``)."""
        changes = self._loads.pop(token, {})
        chats: dict[Key, set[Key]] = {user: set() for user in users}
        for user, chat in active_rows:
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
        for connection_id in targets:
            owner = self._registry.user_of(connection_id)
            if owner is None or owner not in chats:
                continue
            self._registry.set_groups_with_prefix(
                connection_id, CHAT_PREFIX, (chat_group(chat) for chat in chats[owner])
            )
