"""The hub's Server-Sent Events and long-polling connections, by the ``id`` of their requests.

Over these transports one connection is several HTTP requests (a stream or polls, then
``POST``s), so its state lives here between them: :class:`HttpConnectionState` from the first
``GET`` (which claims the negotiation) through the handshake (a ``POST``) to the end, when the
:class:`~.connection.HubConnection` it admitted is finalized. A long-polling connection is
served by a task of its own (its writer hands records to whichever poll is waiting), supervised
here and cancelled when the hub stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from realtime_dispatch.hub.connections.caps import Reservation
from realtime_dispatch.hub.connections.connection import HubConnection
from realtime_dispatch.hub.connections.session import InboundSession
from realtime_dispatch.hub.wire.protocols import Transport
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)

ENDED_KEPT = 30.0
"""How long an ended long-polling connection still answers polls with 204 (then 404)."""


class LongPollWriter:
    """A long-polling connection's :class:`~.connection.Writer`: records go to the poll that is
    waiting, one poll at a time; the writer waits (and so records queue, under the
    slow-consumer bound) while none is."""

    __slots__ = ("_arrived", "_farewell", "_waiter", "gone")

    def __init__(self) -> None:
        self._waiter: asyncio.Future[bytes | None] | None = None
        self._arrived = asyncio.Event()
        self._farewell: bytes | None = None
        """The close message kept for the next poll, when none was waiting for it."""
        self.gone = False
        """The client ended the connection (``DELETE``), or the hub did."""

    @property
    def waiting(self) -> bool:
        """A poll is waiting for records."""
        return self._waiter is not None and not self._waiter.done()

    async def writable(self) -> bool:
        while self._waiter is None or self._waiter.done():
            if self.gone:
                return False
            self._arrived.clear()
            await self._arrived.wait()
        return True

    async def write(self, records: list[bytes]) -> None:
        waiter = self._waiter
        # writable() said a poll waits, and nothing was awaited since
        assert waiter is not None
        assert not waiter.done()
        self._waiter = None
        waiter.set_result(records[0] if len(records) == 1 else b"".join(records))

    async def write_last(self, records: list[bytes]) -> bool:
        """The close message goes to the poll waiting, or is kept for the next one: a client
        closed for not polling (a slow consumer) still gets it before the 204."""
        if self.waiting:
            await self.write(records)
        elif not self.gone:
            self._farewell = b"".join(records)
        else:
            return False
        return True

    def poll(self) -> asyncio.Future[bytes | None]:
        """A poll arrives: the future of its body (None: the connection has ended). An older
        poll still waiting is answered empty, as the client has given up on it."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(b"")
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        if self.gone or self._farewell is not None:
            future.set_result(self.take_farewell())
            return future
        self._waiter = future
        self._arrived.set()
        return future

    def take_farewell(self) -> bytes | None:
        """The close message no poll has had yet (once), or None."""
        farewell, self._farewell = self._farewell, None
        return farewell

    def end(self) -> None:
        self.gone = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._arrived.set()


@dataclass(eq=False, slots=True)
class HttpConnectionState:
    key: str
    """The ``id`` its requests carry: the connection token (negotiate version 1), or the
    connection id (version 0, which has no token)."""
    transport: Transport
    connection_id: str
    token: str
    user_id: Key
    session: InboundSession
    created_at: float
    connection: HubConnection | None = None
    """Set once the handshake was accepted and the connection admitted."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """The handshake was answered (``connection`` set), refused (``refusal``) or timed out."""
    refusal: bytes | None = None
    """The handshake error record, when the handshake was refused."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a ``POST`` is read, so records are taken in order."""
    poller: LongPollWriter | None = None
    ended_at: float | None = None
    reservation: Reservation | None = None
    """The connection's place under the per-user cap, held from the first ``GET`` until the
    handshake registers it (or the connection ends without one)."""

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def end(self, now: float) -> None:
        if self.ended_at is None:
            self.ended_at = now
        if self.reservation is not None:
            self.reservation.release()
        self.answered.set()
        if self.poller is not None:
            self.poller.end()


class HttpTransports:
    __slots__ = ("_by_token", "_tasks")

    def __init__(self) -> None:
        self._by_token: dict[str, HttpConnectionState] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_token)

    def get(self, token: str | None) -> HttpConnectionState | None:
        return self._by_token.get(token) if token else None

    def add(self, state: HttpConnectionState) -> None:
        self._by_token[state.key] = state

    def remove(self, state: HttpConnectionState) -> None:
        if self._by_token.get(state.key) is state:
            del self._by_token[state.key]

    def spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run a connection's task; a failure is logged (the connection ends, the hub goes on)."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            log.error("hub_transport_task_failed", task=task.get_name(), error=type(error).__name__)

    def sweep(self, now: float, handshake_timeout: float) -> None:
        """End connections whose handshake never came; forget ended ones after a while."""
        for state in list(self._by_token.values()):
            if state.ended_at is not None:
                if now - state.ended_at > ENDED_KEPT:
                    self.remove(state)
            elif state.connection is None and now - state.created_at > handshake_timeout:
                state.end(now)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        now = asyncio.get_running_loop().time()
        for state in self._by_token.values():
            state.end(now)
