"""``Typing(chatId)``: the ephemeral "is typing" signal of a chat's members.

For an active member (the connection is in the chat's group), one ``user_typing``
``{chatId, userId, expiresAt}`` goes to the chat's members on this replica, leaving out every
connection of the typist; with the backplane, the same record goes in an envelope
(:mod:`.signal_envelope`) to the other replicas, which leave out the typist's connections too
(:meth:`TypingSignals.received`). At most one per (user, chat) per ``interval``
(:class:`TypingGate`): invocations inside it are accepted and dropped. Nothing is written
anywhere; a non-member, an unknown chat and a bad argument get the same bounded answer.

**Blocks** (``blocked_in_chat``, the reference messenger's blacklist): the rule of sending a
message. A pass through the gate asks whether the typist is blocked in the chat (the same
statement as a send's, at most one query per (user, chat) per interval, under the replica's
bound on the signals' queries); blocked, the invocation is refused as a send is (403's text)
and nothing is sent; otherwise the signal goes out once the answer is in, if the typist is
still a member then. The invocation is answered after the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import structlog

from realtime_dispatch.hub.connections.registry import CHAT_PREFIX, GroupRegistry, is_valid_group
from realtime_dispatch.hub.signals.wire_ids import parse_key, user_id_json
from realtime_dispatch.hub.wire.protocol import invocation_frame
from realtime_dispatch.hub.wire.signal_envelope import decode_signal, encode_signal, is_signal
from realtime_dispatch.values.json_types import JsonValue
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

if TYPE_CHECKING:
    from realtime_dispatch.hub.connections.connection import HubConnection

log = structlog.get_logger(__name__)

USER_TYPING = "user_typing"
NOT_A_MEMBER = "Typing refused: not a member of this chat."
BLOCKED = "Typing refused: the user has blocked you."
UNAVAILABLE = "Typing failed: try again."
ANSWERED_LATER: Final = "answered later"
"""What :meth:`TypingSignals.typing` returns when the invocation is answered after a check."""
BlockedInChat = Callable[[Key, JsonValue], Awaitable[bool]]
"""``blocked_in_chat(user, chat)``: whether the user is blocked in the chat (a send's rule)."""
Complete = Callable[["HubConnection", str | None, str | None, JsonValue], None]
BAD_ARGUMENTS = "Typing takes one argument: the chat id (a string or an integer)."
PARSED_KEPT = 10_000
_TAIL = b'"}]}\x1e'
"""What follows ``expiresAt``'s value in a ``user_typing`` record (:func:`invocation_frame`)."""


class Pass:
    """A key's last pass through the :class:`TypingGate`, and what its signals reuse."""

    __slots__ = ("at", "head")

    def __init__(self, at: float) -> None:
        self.at = at
        self.head: tuple[bytes, str] | None = None
        """The ``user_typing`` record up to its ``expiresAt`` and the user id as the envelope
        carries it (:meth:`TypingSignals.typing`): a signal's record is then one join."""


class TypingGate:
    """At most one pass per key per ``interval``. Pure (the clock is passed in).

    A pass is one lookup (the key's :class:`Pass`, updated in place) and one append to a queue
    of the passes in time order. The keys whose last pass is ``interval`` old are forgotten from
    the queue's head, each once, on later passes (O(1) amortised, no sweep of the whole gate):
    the gate holds only the keys that passed within the last interval, whatever the rate of
    calls."""

    __slots__ = ("_interval", "_passed", "_queue")

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._passed: dict[tuple[Key, str], Pass] = {}
        self._queue: deque[tuple[float, tuple[Key, str], Pass]] = deque()

    def __len__(self) -> int:
        return len(self._passed)

    def allow(self, key: tuple[Key, str], now: float) -> bool:
        return self.enter(key, now) is not None

    def enter(self, key: tuple[Key, str], now: float) -> Pass | None:
        """The key's :class:`Pass` when it passes now, None when it passed within the interval."""
        interval = self._interval
        passed = self._passed.get(key)
        if passed is None:
            passed = self._passed[key] = Pass(now)
        elif now - passed.at < interval:
            return None
        else:
            passed.at = now
        queue = self._queue
        queue.append((now, key, passed))
        while queue and now - queue[0][0] >= interval:
            at, old, entry = queue.popleft()
            if entry.at == at and self._passed.get(old) is entry:  # its last pass, expired
                del self._passed[old]
        return passed


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
    with contextlib.suppress(ValueError):
        value = keys.to_json(keys.from_json(raw))
    group = f"{CHAT_PREFIX}{value}"
    return (value, group) if is_valid_group(group) else None


class TypingSignals:
    """Runs ``Typing`` for the hub: checks, throttles and fans out to this replica."""

    def __init__(
        self,
        registry: GroupRegistry,
        send: Callable[[Sequence[str], bytes], int],
        *,
        interval: float,
        count: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        origin: str = "",
        keys: KeyCodec = UUID_KEYS,
        counters: Mapping[str, Callable[[], object]] | None = None,
        blocked_in_chat: BlockedInChat | None = None,
        complete: Complete | None = None,
    ) -> None:
        self._keys = keys
        self.blocked_in_chat = blocked_in_chat
        """With the blacklist: asked on each pass before the signal goes out."""
        self._complete = complete
        """Answers an invocation after the check (:func:`~.methods.complete`)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._send = send
        """Sends a JSON record to some connections the way a push goes
        (:meth:`~.runtime.Hub.send_to_members`); returns how many got it."""
        self.relay: Callable[[str, bytes], None] | None = None
        """With the backplane: publishes ``(group, envelope)`` to the other replicas."""
        self.origin = origin
        """This replica's id in the envelopes (its own come back from the backplane)."""
        self._registry = registry
        self._interval = interval
        self._count = count
        fast = counters or {}
        self._sent: Callable[[], object] = fast.get("sent") or (lambda: count("sent"))
        self._throttled: Callable[[], object] = fast.get("throttled") or (
            lambda: count("throttled")
        )
        """The two outcomes of every pass and every flood's drop, without a lookup by name."""
        self._clock = clock
        self.gate = TypingGate(interval)
        self._parsed: dict[str, tuple[JsonValue, str]] = {}
        """Chat ids as sent → as the payload carries them and their group (parsing a UUID costs
        more than the rest of the check); at most :data:`PARSED_KEPT`, then started over."""
        self._expires: tuple[int, bytes] = (0, b"")
        """The last ``expiresAt`` written, by its 10 ms: the same text for every signal in it."""

    def _chat(self, arguments: tuple[JsonValue, ...]) -> tuple[JsonValue, str] | None:
        raw = arguments[0] if len(arguments) == 1 else None
        if isinstance(raw, str):
            known = self._parsed.get(raw)
            if known is not None:
                return known
        chat = chat_of(arguments, self._keys)
        if chat is not None and isinstance(raw, str):
            if len(self._parsed) >= PARSED_KEPT:
                self._parsed.clear()
            self._parsed[raw] = chat
        return chat

    def _expires_at(self) -> bytes:
        at = time.time() + self._interval
        bucket = int(at * 100)
        if bucket != self._expires[0]:
            text = datetime.fromtimestamp(bucket / 100, UTC).isoformat(timespec="milliseconds")
            self._expires = (bucket, text.replace("+00:00", "Z").encode())
        return self._expires[1]

    def typing(
        self,
        connection: HubConnection,
        arguments: tuple[JsonValue, ...],
        invocation_id: str | None = None,
    ) -> str | None:
        """The error to answer, None (sent, or dropped inside the interval), or
        :data:`ANSWERED_LATER` (a pass waiting for the block check, which answers it)."""
        chat = self._chat(arguments)
        if chat is None:
            self._count("refused")
            return BAD_ARGUMENTS
        chat_id, group = chat
        if not self._registry.in_group(connection.connection_id, group):
            self._count("refused")
            return NOT_A_MEMBER
        user_id = connection.identity.user_id
        passed = self.gate.enter((user_id, group), self._clock())
        if passed is None:
            self._throttled()
            return None
        if self.blocked_in_chat is not None and self._complete is not None:
            task = asyncio.create_task(
                self._checked(connection, invocation_id, chat_id, group, passed),
                name="hub-typing-check",
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return ANSWERED_LATER
        self._signal(user_id, chat_id, group, passed)
        return None

    async def _checked(
        self,
        connection: HubConnection,
        invocation_id: str | None,
        chat_id: JsonValue,
        group: str,
        passed: Pass,
    ) -> None:
        """A pass of the gate under the blacklist: sent when the typist is not blocked in the
        chat and still a member once the answer is in."""
        assert self.blocked_in_chat is not None
        assert self._complete is not None
        user_id = connection.identity.user_id
        error: str | None = None
        try:
            blocked = await self.blocked_in_chat(user_id, chat_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # PostgreSQL away: nothing sent, the client may type again
            log.warning("hub_typing_check_failed", error=type(exc).__name__)
            blocked, error = True, UNAVAILABLE
        if connection.connection_id not in self._registry:
            return  # closed meanwhile: nobody to answer, nothing to send
        if blocked:
            self._count("refused")
            error = error or BLOCKED
        elif self._registry.in_group(connection.connection_id, group):
            self._signal(user_id, chat_id, group, passed)
        else:  # removed (or gone) during the check
            self._count("refused")
            error = NOT_A_MEMBER
        self._complete(connection, invocation_id, error, None)

    def _signal(self, user_id: Key, chat_id: JsonValue, group: str, passed: Pass) -> None:
        head = passed.head
        if head is None:
            head = passed.head = self._head(user_id, chat_id)
        record = b"".join((head[0], self._expires_at(), _TAIL))
        members = self._registry.members_but(group, user_id)
        if members:
            self._send(members, record)
        if self.relay is not None:
            self.relay(group, encode_signal(self.origin, head[1], record))
        self._sent()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _head(self, user_id: Key, chat_id: JsonValue) -> tuple[bytes, str]:
        user_json = user_id_json(user_id, self._keys)
        record = invocation_frame(
            USER_TYPING, [{"chatId": chat_id, "userId": user_json, "expiresAt": ""}]
        )
        return record[: -len(_TAIL)], str(user_json)

    def received(self, items: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """Fan out the signals among what came from the backplane (but this replica's own);
        returns the rest, the pushes, in order."""
        pushes: list[tuple[str, bytes]] = []
        for group, frame in items:
            if not is_signal(frame):
                pushes.append((group, frame))
                continue
            signal = decode_signal(frame)
            user_id = None if signal is None else parse_key(signal.except_user, self._keys)
            if signal is None or user_id is None:
                self._count("invalid")
            elif signal.origin != self.origin:
                self.fan_out(group, user_id, signal.record)
                self._count("received")
        return pushes

    def fan_out(self, group: str, user_id: Key, record: bytes) -> int:
        """Send ``record`` (JSON) to the group's members on this replica but ``user_id``'s, the
        way a push goes: framed once, written straight to each transport that takes it,
        re-encoded once per other protocol. Returns how many got it."""
        members = self._registry.members_but(group, user_id)
        return self._send(members, record) if members else 0
