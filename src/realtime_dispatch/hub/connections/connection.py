"""One hub connection: its identity, inbound session, outbound buffer and the transport it is
attached to (none while a stateful connection waits to resume).

A connection is the same object whatever carries it (:class:`~.protocols.Transport`: WebSockets,
Server-Sent Events, long polling) and whatever it speaks (:class:`~.protocols.HubProtocol`, from its
handshake): groups, the slow-consumer policy, closing and metrics live here once. A transport
attaches by running :func:`write_loop` with its :class:`Writer` (the WebSocket's
in :mod:`.endpoint`, the others in :mod:`.transports`).

A group send is one :meth:`HubConnection.offer` per member. When nothing is queued and the
transport takes writes (:class:`~.framing.RawSink`), the push's pre-built frame joins the
connection's batch, and the hub writes each batch to its transport once per delivery
(:meth:`HubConnection.flush`). Otherwise the record is queued and the writer task, woken through
``wake``, drains the queue once the transport takes writes again; only it writes queued records.

Whether a push may be written at once is one attribute, :attr:`HubConnection.direct`: the
transport while it takes writes and nothing waits before them, else None. The fan-out reads it
per member instead of asking the transport and the queue (:mod:`.fanout`). It is kept by
:meth:`HubConnection.refresh`, called on every change it depends on: the transport attached or
detached (:meth:`HubConnection.attach_sink`), the server's flow control, close frames and end
(the sink's ``watcher``), a record queued, the queue written out, the connection closing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from starlette.websockets import WebSocket

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import (
    CloseReason,
    CloseRequest,
    Inbound,
    InboundSession,
)
from realtime_dispatch.hub.wire.framing import RawSink, records_frame, ws_frame
from realtime_dispatch.hub.wire.protocol import Invocation
from realtime_dispatch.hub.wire.protocols import HubProtocol, Transport
from realtime_dispatch.values.keys import Key

TOKEN_EXPIRED = CloseRequest(CloseReason.TOKEN_EXPIRED, "token expired", allow_reconnect=True)
TOO_SLOW = CloseRequest(
    CloseReason.SLOW_CONSUMER,
    "Connection closed with an error: the client is not reading fast enough.",
    allow_reconnect=True,
)
"""At the token's ``exp``: the client reconnects with a fresh token from its token factory."""
TOKEN_REVOKED = CloseRequest(CloseReason.TOKEN_REVOKED, "token revoked")


class Wake:
    """The writer's wake-up: an :class:`asyncio.Event` for one waiter, without the running-loop
    lookup of every ``Event.wait()``. On CPython 3.11 that lookup makes a ``getpid()`` system
    call, and a writer waits once per record it is sent: measured at 6% of ``serve``'s CPU at
    10,000 deliveries/s."""

    __slots__ = ("_loop", "_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None


class DrainWake(Wake):
    """A :class:`Wake` that also calls ``drain`` soon after it is set (once per loop turn): a
    transport with no writer task writes its queued records there."""

    __slots__ = ("_drain", "_drain_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, drain: Callable[[], None]) -> None:
        super().__init__()
        self._drain_loop = loop
        self._drain = drain
        self._scheduled = False

    def set(self) -> None:
        super().set()
        if not self._scheduled:
            self._scheduled = True
            self._drain_loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        self._drain()


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_pending: int = 1024
    """Records waiting to be written before the consumer counts as too slow."""
    max_replay_chars: int = 1 << 20
    """Bytes kept for replay under stateful reconnect (unacknowledged records)."""
    max_message_bytes: int = 32 * 1024
    """Largest inbound frame / record accepted."""
    max_write_chars: int = 64 * 1024
    """Bytes of queued records coalesced into one WebSocket frame at most (a record is never
    split)."""
    close_grace: float = 2.0
    """How long a closing connection may take to flush its close message."""


class Writer(Protocol):
    """How :func:`write_loop` hands records to one transport."""

    async def writable(self) -> bool:
        """Wait until records may be written; False once the transport is gone."""
        ...

    async def write(self, records: list[bytes]) -> None:
        """Write whole records (in the connection's protocol) in order."""
        ...

    async def write_last(self, records: list[bytes]) -> bool:
        """Write the last records of a closing connection (its close message), waiting only as
        the transport must; False if they could not go."""
        ...


class WebSocketWriter:
    """Writes to an accepted WebSocket: pre-built frames straight to its transport (``sink``),
    else through the ASGI ``websocket``; text frames for a text protocol, binary otherwise."""

    __slots__ = ("_binary", "_sink", "_websocket")

    def __init__(self, websocket: WebSocket, sink: RawSink | None, *, binary: bool) -> None:
        self._websocket = websocket
        self._sink = sink
        self._binary = binary

    async def writable(self) -> bool:
        sink = self._sink
        while sink is not None and not sink.open():
            if sink.closed():
                return False
            await sink.drained()
        return True

    async def write(self, records: list[bytes]) -> None:
        sink = self._sink
        if sink is not None:
            sink.transport.write(records_frame(records, binary=self._binary))
            return
        payload = records[0] if len(records) == 1 else b"".join(records)
        if self._binary:
            await self._websocket.send_bytes(payload)
        else:  # ASGI carries a text frame as str only: a server without the raw transport
            await self._websocket.send_text(payload.decode())

    async def write_last(self, records: list[bytes]) -> bool:
        if self._sink is not None and self._sink.closed():
            return False
        await self.write(records)  # even under backpressure: it joins the transport's buffer
        return True


@dataclass(slots=True)
class Attachment:
    """The transport a connection currently writes to, and the tasks serving it (none for a
    socket served by callbacks, which gives ``abort`` instead)."""

    transport: Transport
    reader: asyncio.Task[CloseReason] | None = None
    writer: asyncio.Task[None] | None = None
    force_close: asyncio.TimerHandle | None = field(default=None)
    abort: Callable[[], None] | None = None
    """Drops the transport at once (another transport took the connection over)."""

    def stop(self) -> None:
        """Stop serving the connection on this transport (it resumes on another)."""
        for task in (self.reader, self.writer):
            if task is not None:
                task.cancel()
        if self.abort is not None:
            self.abort()


class HubConnection:
    __slots__ = (
        "_on_sent",
        "_sink",
        "attachment",
        "batch",
        "batched",
        "closing",
        "connection_id",
        "detached_at",
        "direct",
        "identity",
        "invoke",
        "last_received",
        "last_sent",
        "limits",
        "loop",
        "outbound",
        "protocol",
        "session",
        "token",
        "transport",
        "wake",
    )

    def __init__(
        self,
        *,
        connection_id: str,
        token: str,
        identity: Identity,
        session: InboundSession,
        outbound: Outbound,
        limits: ConnectionLimits,
        on_sent: Callable[[int], None],
        now: float,
        transport: Transport = Transport.WEBSOCKETS,
    ) -> None:
        self.connection_id = connection_id
        self.token = token
        self.identity = identity
        """Who this is (user, token lifetime): the verified token's :class:`Identity`, replaced
        on a resume with a fresher token of the same user. How it talks is ``transport`` and
        ``protocol``, fixed at admission."""
        self.session = session
        self.transport = transport
        """What carries the connection; fixed (a resume comes back on the same transport)."""
        self.protocol: HubProtocol = session.protocol
        """What it speaks, from its handshake: the records it is sent are of this protocol."""
        self.outbound = outbound
        self.limits = limits
        self._on_sent = on_sent
        self.wake = Wake()
        self.closing: CloseRequest | None = None
        self.attachment: Attachment | None = None
        self.detached_at: float | None = None
        self.last_received = now
        self.last_sent = now
        self.loop = asyncio.get_running_loop()
        self._sink: RawSink | None = None
        self.direct: asyncio.Transport | None = None
        """The transport a push may be written to now, past the queue: set while a sink is
        attached, the connection is not closing, the transport takes writes (not paused, no
        close frame sent or received, not closing) and nothing waits in the queue (no record,
        no control record) nor is kept for replay; None otherwise. Kept by :meth:`refresh`."""
        self.batch: list[bytes] = []
        """Frames offered during the current delivery, written by :meth:`flush`."""
        self.batched = 0
        """How many records those frames hold."""
        self.invoke: Callable[[HubConnection, Invocation], None] | None = None
        """Runs the client's invocations of hub methods (set by the hub when it registers the
        connection, :mod:`.methods`)."""

    @property
    def user_id(self) -> Key:
        return self.identity.user_id

    @property
    def stateful(self) -> bool:
        return self.outbound.stateful

    @property
    def sink(self) -> RawSink | None:
        """The attached transport, while frames may be written to it directly."""
        return self._sink

    def attach_sink(self, sink: RawSink | None) -> None:
        """Write to ``sink`` from now on (None: to no transport, the socket is done); its
        server tells the connection when it pauses, resumes or closes (:meth:`refresh`)."""
        old = self._sink
        if old is not None and old is not sink:
            old.watch(None)
        self._sink = sink
        if sink is not None:
            sink.watch(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Recompute :attr:`direct` from the sink, the connection and its queue."""
        sink = self._sink
        self.direct = (
            sink.transport
            if sink is not None
            and self.closing is None
            and self.outbound.writes_through()
            and sink.open()
            else None
        )

    def send(self, record: bytes) -> None:
        """Queue one sequenced record for the writer; a consumer that cannot keep up is closed."""
        if self.closing is not None:
            return
        if self.outbound.push(record):
            self.direct = None  # the next push goes behind this record
            self.wake.set()
        else:
            self._too_slow()

    def reply(self, record: bytes) -> None:
        """:meth:`send` of an answer to the client (a completion), written to the transport at
        once, as a push's frames are, when nothing is queued before it, the transport takes
        writes and the token is still valid; otherwise queued for the writer as :meth:`send`."""
        sink = self._sink
        outbound = self.outbound
        if (
            sink is None
            or self.batch
            or self.closing is not None
            or outbound.has_pending()
            or not sink.open()
            or self.identity.expires_at <= time.time()
        ):
            self.send(record)
        elif outbound.push_written(record):
            sink.transport.write(ws_frame(record, binary=self.protocol.binary))
            self.wrote(1)
        else:
            self._too_slow()

    def offer(
        self,
        records: Sequence[bytes],
        frames: Sequence[bytes],
        data: bytes,
        touched: list[HubConnection],
    ) -> None:
        """Send a run of sequenced records for one group, whose frames are built already:
        ``frames[i]`` is the WebSocket frame of ``records[i]`` and ``data`` the frames joined
        (all in the connection's protocol).

        Straight to the batch when nothing is queued and the transport takes writes (without
        stateful reconnect, ``data`` as one piece); the connection is then appended to
        ``touched`` (once), whose owner calls :meth:`flush`. Once this delivery put something in
        the batch, later runs go there too without checking the transport again: nothing is
        written to it, nor can its state change, before the owner's :meth:`flush` at the end of
        the same synchronous delivery. Otherwise the records queue for the writer task.

        Without stateful reconnect, :attr:`direct` says which; with it (``direct`` is then
        always None), the transport and the queue are asked.
        """
        batch = self.batch
        if not batch:
            if self.direct is None:
                sink = self._sink
                if (
                    not self.outbound.stateful
                    or sink is None
                    or self.closing is not None
                    or self.outbound.has_pending()
                    or not sink.open()
                ):
                    for record in records:
                        self.send(record)
                    return
            touched.append(self)
        elif self.closing is not None:
            return
        outbound = self.outbound
        if not outbound.stateful:
            if outbound.push_written_run(len(records)):
                batch.append(data)
                self.batched += len(records)
            else:
                self._too_slow()
            return
        for record, frame in zip(records, frames, strict=True):  # each kept for replay
            if not outbound.push_written(record):
                self._too_slow()
                return
            batch.append(frame)
            self.batched += 1

    def flush(self) -> int:
        """Write the batched frames to the transport in one call; returns how many records."""
        batch, records = self.batch, self.batched
        self.batch, self.batched = [], 0
        sink = self._sink
        if sink is None or not batch:  # detached since: stateful records are replayed
            return 0
        if len(batch) == 1:
            sink.transport.write(batch[0])
        else:
            sink.transport.writelines(batch)
        return records

    def _too_slow(self) -> None:
        self.close(TOO_SLOW)

    def send_control(self, record: bytes) -> None:
        if self.closing is None:
            self.outbound.push_control(record)
            self.direct = None
            self.wake.set()

    def close(self, request: CloseRequest) -> None:
        """Start closing: the writer sends the close message (if any) and stops. If it cannot
        within ``close_grace`` (a stalled socket), its task is cancelled."""
        if self.closing is not None:
            return
        self.closing = request
        self.direct = None
        self.outbound.take_control()
        if request.reason is not CloseReason.CLIENT_CLOSE:
            self.outbound.push_control(self.protocol.close(request.error, request.allow_reconnect))
        self.wake.set()
        attachment = self.attachment
        if attachment is not None and attachment.writer is not None:
            attachment.force_close = self.loop.call_later(
                self.limits.close_grace, attachment.writer.cancel
            )

    def due(self) -> list[bytes] | None:
        """The queued records to write next (at most ``max_write_chars`` of them), once the
        transport takes writes; None when the token expired before the hub's timer ran: the
        connection is then closing, and only its close message goes."""
        if self.identity.expires_at <= time.time():
            self.close(TOKEN_EXPIRED)
            return None
        records, _ = self.outbound.take(self.limits.max_write_chars)
        return records

    def wrote(self, records: int) -> None:
        """``records`` queued records were written to the transport: once the queue is empty,
        pushes may be written at once again (:meth:`refresh`)."""
        self.last_sent = self.loop.time()
        self._on_sent(records)
        self.refresh()


async def write_loop(connection: HubConnection, writer: Writer) -> None:
    """Drain the connection's outbound queue into its transport through ``writer`` until the
    connection closes (after its close message) or the transport does."""
    outbound = connection.outbound
    while True:
        if connection.closing is not None:
            last = outbound.take_control()
            if last and await writer.write_last(last):
                connection.wrote(len(last))
            return
        if not outbound.has_pending():
            connection.wake.clear()
            await connection.wake.wait()
            continue
        if not await writer.writable():
            return
        if connection.closing is not None:  # closed while waiting: only the close message goes
            continue
        records = connection.due()
        if records is not None:
            await writer.write(records)
            connection.wrote(len(records))


def apply(connection: HubConnection, inbound: Inbound) -> None:
    """Act on what the client sent (after the handshake), whatever the transport."""
    for reply in inbound.replies:
        connection.send(reply)
    if inbound.invocations and connection.invoke is not None:
        for invocation in inbound.invocations:
            connection.invoke(connection, invocation)
    if inbound.acked is not None:
        connection.outbound.ack(inbound.acked)
    if inbound.ack_to_send is not None:
        connection.send_control(connection.protocol.ack(inbound.ack_to_send))
    if inbound.close is not None:
        connection.close(inbound.close)


def receive(connection: HubConnection, data: str | bytes) -> Inbound | None:
    """Read what the client sent in one piece (a WebSocket message, an HTTP body) and act on it
    (:func:`apply`); returns what was read. None when it was one ``Typing``
    invocation on a session without stateful reconnect (nothing numbered, nothing to
    acknowledge), the hub's most frequent inbound record: it is run at once, no
    :class:`~.session.Inbound` built for it; None too for a lone ``Ping`` (nothing to do)."""
    session = connection.session
    if session.lone_ping(data):
        return None
    invoke = connection.invoke
    if invoke is not None and not session.stateful:
        invocation = session.lone_typing(data)
        if invocation is not None:
            invoke(connection, invocation)
            return None
        inbound = session.feed_records(data)  # read once: the fast path has turned it down
    else:
        inbound = session.feed(data)
    apply(connection, inbound)
    return inbound
