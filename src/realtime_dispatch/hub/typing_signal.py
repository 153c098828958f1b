"""``Typing(chatId)``: the ephemeral "is typing" signal of a chat's members.

For an active member (the connection is in the chat's group), one ``user_typing``
``{chatId, userId, expiresAt}`` goes to the chat's members on this replica, leaving out every
connection of the typist. At most one per (user, chat) per ``interval``
(:class:`TypingGate`): invocations inside it are accepted and dropped. Nothing is written
anywhere; a non-member, an unknown chat and a bad argument get the same bounded answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from realtime_dispatch.hub.protocol import ProtocolError, invocation_frame
from realtime_dispatch.hub.registry import CHAT_PREFIX, GroupRegistry, is_valid_group
from realtime_dispatch.hub.wire import HubProtocol
from realtime_dispatch.keys import UUID_KEYS, Key, KeyCodec
from realtime_dispatch.push import JsonValue

if TYPE_CHECKING:
    from realtime_dispatch.hub.connection import HubConnection

USER_TYPING = "user_typing"
NOT_A_MEMBER = "Typing refused: not a member of this chat."
BAD_ARGUMENTS = "Typing takes one argument: the chat id (a string or an integer)."


class TypingGate:
    """At most one pass per key per ``interval``. Pure (the clock is passed in).

    Keys are kept in the order of their last pass, so the expired ones are at the front and
    each call forgets them first: the gate holds only the keys that passed within the last
    interval, whatever the rate of calls."""

    __slots__ = ("_interval", "_passed")

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._passed: dict[tuple[Key, str], float] = {}

    def __len__(self) -> int:
        return len(self._passed)

    def allow(self, key: tuple[Key, str], now: float) -> bool:
        passed = self._passed
        horizon = now - self._interval
        while passed:  # expired keys are at the front: each is dropped once, O(1) amortised
            oldest = next(iter(passed))
            if passed[oldest] > horizon:
                break
            del passed[oldest]
        last = passed.get(key)
        if last is not None and last > horizon:
            return False
        passed.pop(key, None)
        passed[key] = now
        return True


def chat_of(
    arguments: tuple[JsonValue, ...], keys: KeyCodec = UUID_KEYS
) -> tuple[JsonValue, str] | None:
    """The chat id as the payload carries it and its group, from ``Typing``'s arguments; None
    when they are not one string or integer id. A key of ``keys``' type is spelled as the
    groups spell it (a UUID lower case and dashed; ``"17"`` or ``17`` for bigint keys is the
    number 17); anything else is kept as given, and no connection is in its group."""
    if len(arguments) != 1:
        return None
    raw = arguments[0]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    value: JsonValue = raw
    try:
        key = keys.from_json(raw)
    except ValueError:
        pass
    else:
        value = keys.to_json(key)
    group = f"{CHAT_PREFIX}{value}"
    return (value, group) if is_valid_group(group) else None


class TypingSignals:
    """Runs ``Typing`` for the hub: checks, throttles and fans out to this replica."""

    def __init__(
        self,
        registry: GroupRegistry,
        connections: dict[str, HubConnection],
        *,
        interval: float,
        count: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        keys: KeyCodec = UUID_KEYS,
    ) -> None:
        self._keys = keys
        self._registry = registry
        self._connections = connections
        self._interval = interval
        self._count = count
        self._clock = clock
        self.gate = TypingGate(interval)

    def typing(self, connection: HubConnection, arguments: tuple[JsonValue, ...]) -> str | None:
        """The error to answer, or None (sent, or dropped inside the interval)."""
        chat = chat_of(arguments, self._keys)
        if chat is None:
            self._count("refused")
            return BAD_ARGUMENTS
        chat_id, group = chat
        if not self._registry.in_group(connection.connection_id, group):
            self._count("refused")
            return NOT_A_MEMBER
        user_id = connection.user_id
        if not self.gate.allow((user_id, group), self._clock()):
            self._count("throttled")
            return None
        expires = datetime.fromtimestamp(time.time() + self._interval, UTC)
        payload: JsonValue = {
            "chatId": chat_id,
            "userId": self._keys.to_json(user_id),
            "expiresAt": expires.isoformat().replace("+00:00", "Z"),
        }
        self.fan_out(group, user_id, invocation_frame(USER_TYPING, [payload]))
        self._count("sent")
        return None

    def fan_out(self, group: str, user_id: Key, record: bytes) -> int:
        """Send ``record`` (JSON) to the group's members on this replica but ``user_id``'s;
        re-encoded once per other protocol. Returns how many got it."""
        connections = self._connections
        encoded: dict[HubProtocol, bytes | None] = {}
        sent = 0
        for connection_id in self._registry.members(group):
            member = connections.get(connection_id)
            if member is None or member.user_id == user_id:
                continue
            protocol = member.protocol
            if protocol.from_json is None:
                member.send(record)
            else:
                if protocol not in encoded:
                    try:
                        encoded[protocol] = protocol.from_json([record])[0]
                    except ProtocolError:
                        encoded[protocol] = None
                other = encoded[protocol]
                if other is None:
                    continue
                member.send(other)
            sent += 1
        return sent
