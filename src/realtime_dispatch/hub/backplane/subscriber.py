"""The Redis backplane: every replica subscribes to one pub/sub channel and delivers each push to
its own connections. The frame of a push is its invocation record, serialised once by the
publisher and relayed byte for byte. Two message formats, each on its own channel:

* ``CHANNEL`` (format 1, one push per message): ``{group}\\n{frame}``;
* ``CHANNEL:v2`` (format 2, a batch per message, in order): ``{group}\\n{length}\\n{frame}``
  repeated, ``length`` the frame's size in bytes as decimal digits. The first entry may be the
  worker's membership marks (:mod:`realtime_dispatch.delivery.marks`): group
  :data:`MARK_GROUP`, its "frame" the tokens joined by spaces. A replica that predates the marks
  reads it as a push to a group nobody is in, so a worker may send them before the hubs read
  them.

A replica of this version subscribes to both (in one ``SUBSCRIBE``, so both or neither); a
replica of an older version reads format 1 only. A publisher sends format 2 while every replica
subscribed to format 1 is subscribed to format 2 too (``PUBSUB NUMSUB``, see
:class:`~realtime_dispatch.hub.backplane.publishers.RedisHubPublisher`), and format 1 otherwise, so
a
rolling upgrade of the hubs loses nothing and a worker may be upgraded before or after them.

One channel rather than a channel per group: a replica would otherwise have to (un)subscribe as
memberships change, and a change racing a push could lose it. Every replica reads every push and
looks its group up locally, which at this scale costs less than the bookkeeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import hiredis
import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from realtime_dispatch.hub.backplane.resp import Stream, open_stream, pack, read_into
from realtime_dispatch.hub.wire.signal_envelope import is_signal

log = structlog.get_logger(__name__)

CHANNEL = "realtime-dispatch:hub:messenger"
MAX_BATCH = 256
"""Pushes handed to ``deliver`` at once (a batch message is never split)."""

HEALTH_CHECK_INTERVAL = 10.0
"""Seconds a subscriber's connection may stay silent before it is sent a ``PING``."""

MARK_GROUP = "$membership-mark"
"""The group of a format-2 message's marker entry (no connection's group starts with ``$``)."""

Deliver = Callable[[Sequence[tuple[str, bytes]], Sequence[str]], Awaitable[object]]
"""``deliver(pushes, marks)``: ``marks`` the membership marks every message of the pushes carried
(empty when one carried none)."""


def encode_push(group: str, frame: bytes) -> bytes:
    return group.encode() + b"\n" + frame


def decode_push(data: bytes) -> tuple[str, bytes] | None:
    """The group and the record bytes (checked to be UTF-8: they go out as text frames)."""
    group, sep, frame = data.partition(b"\n")
    if not sep or not group or not frame:
        return None
    try:
        if not frame.isascii():  # checked, never kept as str: the bytes go out as they are
            frame.decode()
        return group.decode(), frame
    except UnicodeDecodeError:
        return None


def batch_channel(channel: str) -> str:
    """The channel of format 2 beside a format-1 ``channel``."""
    return f"{channel}:v2"


def encode_batch(items: Sequence[tuple[str, bytes]], marks: Sequence[str] = ()) -> bytes:
    parts: list[bytes] = []
    if marks:
        tokens = " ".join(marks).encode()
        parts += (MARK_GROUP.encode(), b"\n", b"%d\n" % len(tokens), tokens)
    for group, frame in items:
        parts += (group.encode(), b"\n", b"%d\n" % len(frame), frame)
    return b"".join(parts)


def decode_batch(data: bytes) -> list[tuple[str, bytes]] | None:
    """The entries of a format-2 message (a marker entry first, if any: :func:`split_marks`),
    or None if any part of it is malformed."""
    items: list[tuple[str, bytes]] = []
    at, end = 0, len(data)
    try:
        while at < end:
            group_end = data.index(b"\n", at)
            length_end = data.index(b"\n", group_end + 1)
            digits = data[group_end + 1 : length_end]
            if not digits.isdigit():
                return None
            frame_end = length_end + 1 + int(digits)
            frame = data[length_end + 1 : frame_end]
            if group_end == at or not frame or frame_end > end:
                return None
            # checked, never kept as str: the bytes go out as they are (a signal's envelope is
            # checked when it is opened, :mod:`.signal_envelope`)
            if not frame.isascii() and not is_signal(frame):
                frame.decode()
            items.append((data[at:group_end].decode(), frame))
            at = frame_end
    except (ValueError, UnicodeDecodeError):  # a missing separator, or not UTF-8
        return None
    return items


def split_marks(items: list[tuple[str, bytes]]) -> tuple[list[tuple[str, bytes]], list[str]]:
    """A decoded message's pushes and the membership marks of its marker entry (none if it
    has none)."""
    if items and items[0][0] == MARK_GROUP:
        return items[1:], items[0][1].decode().split()
    return items, []


def redis_client(url: str, *, timeout: float | None = 2.0) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=2.0,
        health_check_interval=10,
    )


class BackplaneSubscriber:
    """Reads the channel and hands batches of ``(group, frame)`` to ``deliver``; reconnects by
    itself. Pushes published while it is disconnected are not seen (pub/sub keeps nothing);
    clients recover those over REST, as after any reconnect.

    redis-py opens the connection; the subscription and its messages are RESP written and read
    here (:mod:`.resp`): redis-py's ``get_message`` costs several times the decoding and
    delivery of a message (a retry wrapper, a timeout and a dict per message). What one read
    brings is delivered at once (up to :data:`MAX_BATCH` pushes): one membership barrier.
    A connection silent for ``health_check_interval`` is sent a ``PING``; one silent for twice
    that is given up and reconnected."""

    def __init__(
        self,
        url: str,
        deliver: Deliver,
        *,
        channel: str = CHANNEL,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float = 5.0,
        health_check_interval: float = HEALTH_CHECK_INTERVAL,
    ) -> None:
        self._url = url
        self._deliver = deliver
        self._channel = channel.encode()
        self._batch_channel = batch_channel(channel).encode()
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._health_check_interval = health_check_interval
        self._last_read = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self.ready = asyncio.Event()

    async def run(self) -> None:
        delay = self._reconnect_delay
        while True:
            client = redis_client(self._url, timeout=None)
            stream: Stream | None = None
            try:
                stream = await open_stream(client)
                parser = await self._subscribe(stream)
                self.ready.set()
                log.info("backplane_subscribed")
                delay = self._reconnect_delay
                await self._read(stream, parser)
            except (RedisError, OSError, hiredis.ProtocolError) as exc:
                log.warning("backplane_lost", error=type(exc).__name__, retry_in=delay)
            finally:
                self.ready.clear()
                if stream is not None:
                    await stream[0].disconnect()
                await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_reconnect_delay)

    async def _subscribe(self, stream: Stream) -> hiredis.Reader:
        """Subscribe to both formats' channels; the parser holding what followed the two
        confirmations (messages may come in the same read)."""
        stream[2].write(pack(b"SUBSCRIBE", self._channel, self._batch_channel))
        parser = hiredis.Reader()
        confirmed = 0
        while confirmed < 2:
            reply = parser.gets()
            if reply is False:
                await read_into(stream, parser)
                continue
            if not isinstance(reply, list) or reply[0] != b"subscribe":
                raise ConnectionError(f"unexpected answer to SUBSCRIBE: {reply!r}")
            confirmed += 1
        return parser

    async def _read(self, stream: Stream, parser: hiredis.Reader) -> None:
        loop = asyncio.get_running_loop()
        self._last_read = loop.time()
        self._watchdog = loop.call_later(self._health_check_interval / 2, self._check, stream[2])
        try:
            while True:
                batch: list[tuple[str, bytes]] = []
                marks: list[str] = []
                while (reply := parser.gets()) is not False:
                    message = self._take(reply)
                    if message is None:
                        continue
                    pushes, message_marks = message
                    # Messages join a batch only with the same marks: a batch is ordered when
                    # the replica heard one of its marks, which must hold for each message.
                    if batch and (message_marks != marks or len(batch) >= MAX_BATCH):
                        await self._deliver(batch, marks)
                        batch = []
                    batch += pushes
                    marks = message_marks
                if batch:
                    await self._deliver(batch, marks)
                await read_into(stream, parser)
                self._last_read = loop.time()
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()

    def _take(self, reply: object) -> tuple[list[tuple[str, bytes]], list[str]] | None:
        """The pushes and membership marks of one reply (a ``message``); None for pongs."""
        if not isinstance(reply, list) or len(reply) != 3 or reply[0] != b"message":
            return None
        channel, data = reply[1], reply[2]
        if channel == self._batch_channel:
            entries = decode_batch(data)
            message = None if entries is None else split_marks(entries)
        elif channel == self._channel:
            one = decode_push(data)
            message = None if one is None else ([one], [])
        else:
            return None
        if message is None:
            log.warning("backplane_message_invalid")
        return message

    def _check(self, writer: asyncio.StreamWriter) -> None:
        """Twice per interval: ``PING`` a connection silent for an interval, give up on one
        silent for two (the read then fails and the subscriber reconnects)."""
        loop = asyncio.get_running_loop()
        silent = loop.time() - self._last_read
        if silent >= 2 * self._health_check_interval:
            log.warning("backplane_silent", seconds=round(silent, 1))
            writer.transport.abort()
            return
        if silent >= self._health_check_interval:
            writer.write(pack(b"PING"))
        self._watchdog = loop.call_later(self._health_check_interval / 2, self._check, writer)
