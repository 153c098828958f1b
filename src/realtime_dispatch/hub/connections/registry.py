"""Which connection is in which group, and whose it is: :class:`GroupRegistry`. Pure; it knows
nothing about sockets, only connection ids, user ids and group names.

Group names are ``user:{userId}`` and ``chat:{chatId}`` (:func:`user_group`, :func:`chat_group`),
the key spelled as ``str`` spells it: a canonical UUID, ``17`` for a bigint key, a text key as it
is (:mod:`realtime_dispatch.values.keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from realtime_dispatch.values.keys import Key

CHAT_PREFIX = "chat:"
USER_PREFIX = "user:"
MAX_GROUP_NAME = 200


def user_group(user_id: Key) -> str:
    return f"{USER_PREFIX}{user_id}"


def chat_group(chat_id: Key) -> str:
    return f"{CHAT_PREFIX}{chat_id}"


def is_valid_group(name: str) -> bool:
    return 0 < len(name) <= MAX_GROUP_NAME and name.isprintable() and "\n" not in name


class GroupRegistry:
    """Connection ↔ groups, and user → connections."""

    __slots__ = ("_by_user", "_groups_of", "_members", "_user_of", "on_group_change")

    def __init__(self) -> None:
        self.on_group_change: Callable[[str, bool], None] | None = None
        """Told of every group that gains its first member (True) or loses its last (False)."""
        self._members: dict[str, set[str]] = {}
        self._groups_of: dict[str, set[str]] = {}
        self._user_of: dict[str, Key] = {}
        self._by_user: dict[Key, set[str]] = {}

    def __len__(self) -> int:
        return len(self._user_of)

    def __contains__(self, connection_id: object) -> bool:
        return connection_id in self._user_of

    def add_connection(self, connection_id: str, user_id: Key) -> None:
        if connection_id in self._user_of:
            raise ValueError("connection already registered")
        self._user_of[connection_id] = user_id
        self._groups_of[connection_id] = set()
        self._by_user.setdefault(user_id, set()).add(connection_id)

    def remove_connection(self, connection_id: str) -> None:
        """Forget a connection and leave all its groups. Unknown ids are ignored."""
        user_id = self._user_of.pop(connection_id, None)
        if user_id is None:
            return
        for group in self._groups_of.pop(connection_id):
            self._discard_member(group, connection_id)
        connections = self._by_user[user_id]
        connections.discard(connection_id)
        if not connections:
            del self._by_user[user_id]

    def join(self, connection_id: str, group: str) -> None:
        groups = self._groups_of.get(connection_id)
        if groups is None or group in groups:
            return
        groups.add(group)
        members = self._members.get(group)
        if members is None:
            members = self._members[group] = set()
            if self.on_group_change is not None:
                self.on_group_change(group, True)
        members.add(connection_id)

    def leave(self, connection_id: str, group: str) -> None:
        groups = self._groups_of.get(connection_id)
        if groups is None or group not in groups:
            return
        groups.discard(group)
        self._discard_member(group, connection_id)

    def set_groups_with_prefix(
        self, connection_id: str, prefix: str, groups: Iterable[str]
    ) -> None:
        """Make the connection's groups that start with ``prefix`` exactly ``groups``."""
        current = self._groups_of.get(connection_id)
        if current is None:
            return
        wanted = set(groups)
        for group in [g for g in current if g.startswith(prefix) and g not in wanted]:
            self.leave(connection_id, group)
        for group in wanted:
            self.join(connection_id, group)

    def members(self, group: str) -> tuple[str, ...]:
        """A snapshot of the group's connection ids (empty for an unknown group)."""
        members = self._members.get(group)
        return tuple(members) if members else ()

    def members_but(self, group: str, user_id: Key) -> tuple[str, ...]:
        """:meth:`members` but ``user_id``'s connections (a typist's)."""
        members = self._members.get(group)
        if not members:
            return ()
        own = self._by_user.get(user_id)
        return tuple(members.difference(own) if own else members)

    def in_group(self, connection_id: str, group: str) -> bool:
        groups = self._groups_of.get(connection_id)
        return groups is not None and group in groups

    def groups_of(self, connection_id: str) -> frozenset[str]:
        return frozenset(self._groups_of.get(connection_id, ()))

    def user_of(self, connection_id: str) -> Key | None:
        return self._user_of.get(connection_id)

    def connections_of(self, user_id: Key) -> tuple[str, ...]:
        return tuple(self._by_user.get(user_id, ()))

    def connection_count(self, user_id: Key) -> int:
        return len(self._by_user.get(user_id, ()))

    def users(self) -> frozenset[Key]:
        return frozenset(self._by_user)

    def group_count(self) -> int:
        return len(self._members)

    def _discard_member(self, group: str, connection_id: str) -> None:
        members = self._members[group]
        members.discard(connection_id)
        if not members:
            del self._members[group]
            if self.on_group_change is not None:
                self.on_group_change(group, False)
