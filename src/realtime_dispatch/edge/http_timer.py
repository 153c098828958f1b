"""The one timer of an HTTP connection (:mod:`.http_protocol`): :class:`ConnectionTimer`.

It holds the deadline the connection is under (its request head, its body, its lingering
close), armed and cancelled in the parser's callbacks: no task, no polling. When it fires while
the client's bytes wait unread in this server's own socket buffer, or while reading is paused by
the server's own flow control, the server is behind, not the client: the deadline is pushed
``BACKLOG_GRACE`` further, up to the timeout once over (:meth:`ConnectionTimer.server_behind`).
:func:`peer_closed` tells the opposite case: a client that gave up while its request waited.
:class:`LingeringClose` is the end of a connection answered before it was read.
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import sys
import termios
from collections.abc import Callable

import structlog
from uvicorn.protocols.http.flow_control import FlowControl

from realtime_dispatch.edge.http_limits import LINGER_BYTES, LINGER_SECONDS

log = structlog.get_logger(__name__)

BACKLOG_GRACE = 1.0
"""Seconds more for a connection whose bytes wait in this server's own backlog at its timer."""


def unread_bytes(transport: asyncio.BaseTransport) -> int:
    """Bytes the kernel holds for this connection that the server has not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):  # closed meanwhile
        return 0
    return int.from_bytes(answer, sys.byteorder)


TCP_CLOSE_WAIT = 8
"""``tcpi_state`` of a connection whose peer has closed its side (Linux ``TCP_INFO``)."""


def peer_closed(transport: asyncio.BaseTransport) -> bool:
    """The client has closed its side already: on a server that fell behind, it gave up while
    its request waited unread in this server's backlog (False where it cannot be told)."""
    sock = transport.get_extra_info("socket")
    tcp_info = getattr(socket, "TCP_INFO", None)
    if sock is None or tcp_info is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        state = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 1)
    except (OSError, ValueError):  # closed meanwhile
        return False
    return bool(state) and state[0] == TCP_CLOSE_WAIT


class ConnectionTimer:
    __slots__ = ("_after_read", "_deferred", "_flow", "_handle", "_loop", "_transport")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, flow: FlowControl
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._flow = flow
        self._handle: asyncio.TimerHandle | None = None
        self._deferred = 0.0
        """Seconds of grace given to the current deadline for bytes in the server's backlog."""
        self._after_read: tuple[float, Callable[[], None]] | None = None
        """A deadline to arm once the current read is parsed (:meth:`arm_after_read`)."""

    def arm(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` in ``delay`` seconds, instead of what was armed."""
        handle = self._handle
        if handle is not None:
            handle.cancel()
        self._deferred = 0.0
        self._after_read = None
        self._handle = self._loop.call_later(delay, callback)

    def arm_after_read(self, delay: float, callback: Callable[[], None]) -> None:
        """:meth:`arm` once the read being parsed is done (:meth:`settle`), unless the timer is
        armed or disarmed before: a request body that arrives in the same read as its head (the
        common case) then costs no timer at all. The deadline starts at the same moment."""
        self._after_read = (delay, callback)

    def settle(self) -> None:
        """A read is parsed: arm what :meth:`arm_after_read` left, if nothing replaced it."""
        after_read = self._after_read
        if after_read is not None:
            self.arm(*after_read)

    def disarm(self) -> None:
        self._after_read = None
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None

    def fired(self) -> None:
        """The armed callback runs: nothing is armed any more."""
        self._handle = None

    def server_behind(self, timeout: float, callback: Callable[[], None]) -> bool:
        """True (and ``callback`` armed again for ``BACKLOG_GRACE``) when what is late is
        waiting on this server, not on the client; at most ``timeout`` more in all."""
        if self._deferred >= timeout:
            return False
        if not (self._flow.read_paused or unread_bytes(self._transport)):
            return False
        self._deferred += BACKLOG_GRACE
        self._handle = self._loop.call_later(BACKLOG_GRACE, callback)
        log.debug("http_timeout_deferred", deferred_s=self._deferred)
        return True


class LingeringClose:
    """A connection's lingering close: half-closed (FIN), what the client still sends discarded
    unparsed, then closed after ``LINGER_SECONDS`` or past ``limit`` bytes discarded."""

    __slots__ = ("discarded", "limit")

    def __init__(self) -> None:
        self.discarded = -1
        """Bytes discarded since the half-close; -1 while not lingering."""
        self.limit = LINGER_BYTES

    @property
    def on(self) -> bool:
        return self.discarded >= 0

    def begin(self, transport: asyncio.Transport, timer: ConnectionTimer) -> None:
        self.discarded = 0
        if transport.can_write_eof():
            transport.write_eof()
        timer.arm(LINGER_SECONDS, transport.close)

    def discard(self, size: int, transport: asyncio.Transport) -> None:
        self.discarded += size
        if self.discarded > self.limit:
            transport.close()
