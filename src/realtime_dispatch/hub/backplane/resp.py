"""Redis on the backplanes' hot paths without redis-py's per-command machinery.

redis-py opens the connection (:func:`open_stream`: the URL's host or socket, TLS, credentials,
connect timeout, as :func:`~realtime_dispatch.hub.backplane.subscriber.redis_client` configures
them);
what is then written and read on it is RESP handled here, with hiredis's reply parser. A
``PUBLISH`` through redis-py costs about 3.5 times the command written and its reply read
directly (157 against 44 µs of CPU on the benchmark machine), and a pub/sub message read through
``get_message`` several times its decoding and delivery: both are paid once per dispatcher
batch, by the worker and by every hub replica.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

Stream = tuple[Any, asyncio.StreamReader, asyncio.StreamWriter]
"""redis-py's connection object (to disconnect it), and its reader and writer."""

READ_SIZE = 256 * 1024


async def open_stream(client: aioredis.Redis) -> Stream:
    """A new connection of ``client``'s, connected and authenticated by redis-py."""
    connection: Any = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    await connection.connect()
    reader = getattr(connection, "_reader", None)
    writer = getattr(connection, "_writer", None)
    if reader is None or writer is None:  # another redis-py connection class
        await connection.disconnect()
        raise ConnectionError("the Redis connection exposes no stream")
    return connection, reader, writer


async def read_into(stream: Stream, parser: hiredis.Reader) -> None:
    """Feed ``parser`` what the next read of ``stream`` brings; the server closing it is a
    :class:`ConnectionError`."""
    data = await stream[1].read(READ_SIZE)
    if not data:
        raise ConnectionError("the Redis server closed the connection")
    parser.feed(data)


def pack(*args: bytes) -> bytes:
    """A command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")
    return b"".join(parts)


class CommandConnection:
    """One connection for commands, pipelined: each is written at once and its reply is the
    next one read (callers may overlap). A command without a reply within ``timeout`` seconds
    closes the connection: every command waiting on it fails with :class:`ConnectionError`,
    as do those on a connection that is lost, and the next command connects anew. An error
    reply raises :class:`redis.exceptions.ResponseError`."""

    def __init__(self, client: aioredis.Redis, *, timeout: float = 2.0) -> None:
        self._client = client
        self._timeout = timeout
        self._stream: Stream | None = None
        self._connecting = asyncio.Lock()
        self._waiting: collections.deque[tuple[asyncio.Future[object], float]] = collections.deque()
        self._reading: asyncio.Task[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._timed_out = False

    async def execute(self, *args: bytes) -> object:
        [reply] = await self.pipeline([args])
        return reply

    async def pipeline(self, commands: list[tuple[bytes, ...]]) -> list[object]:
        """Write ``commands`` at once; their replies, in order (the first error raised)."""
        stream = self._stream or await self._connect()
        loop = asyncio.get_running_loop()
        due = loop.time() + self._timeout
        replies: list[asyncio.Future[object]] = []
        for _ in commands:
            reply: asyncio.Future[object] = loop.create_future()
            self._waiting.append((reply, due))
            replies.append(reply)
        stream[2].write(b"".join(pack(*args) for args in commands))
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._check)
        return [await reply for reply in replies]

    async def aclose(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        await self._lost(ConnectionError("connection closed"))

    async def _connect(self) -> Stream:
        async with self._connecting:
            if self._stream is None:
                stream = await open_stream(self._client)
                self._stream = stream
                self._reading = asyncio.create_task(self._read(stream), name="redis-replies")
            return self._stream

    async def _read(self, stream: Stream) -> None:
        parser = hiredis.Reader()
        waiting = self._waiting
        error: Exception = ConnectionError("the Redis server closed the connection")
        self._timed_out = False
        try:
            while data := await stream[1].read(READ_SIZE):
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    if not waiting:  # a reply nobody asked for: out of step, start over
                        raise ConnectionError("unexpected reply from Redis")
                    future, _ = waiting.popleft()
                    if future.done():  # its caller gave up
                        continue
                    if isinstance(reply, hiredis.ReplyError):
                        future.set_exception(ResponseError(str(reply)))
                    else:
                        future.set_result(reply)
        except (OSError, hiredis.ProtocolError) as exc:
            error = ConnectionError(f"Redis connection lost ({type(exc).__name__})")
        if self._timed_out:
            error = ConnectionError(f"no reply from Redis within {self._timeout:g} s")
        if self._stream is stream:
            self._reading = None
            await self._lost(error)

    async def _lost(self, error: Exception) -> None:
        """The connection is given up: fail what waits on it, and disconnect."""
        stream, self._stream = self._stream, None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if stream is not None:
            await stream[0].disconnect()

    def _check(self) -> None:
        """The oldest command past its time closes the connection (its reader then fails
        every waiting command); otherwise look again when the oldest is due."""
        self._watchdog = None
        if not self._waiting or self._stream is None:
            return
        loop = asyncio.get_running_loop()
        due = self._waiting[0][1]
        if due <= loop.time():
            self._timed_out = True
            self._stream[2].transport.abort()
            return
        self._watchdog = loop.call_later(due - loop.time(), self._check)
