"""Server → client WebSocket frames built once, and the raw transport they are written to.

Server frames are unmasked (RFC 6455 §5.1), so one record sent to a group is the same bytes for
every member: :func:`text_frame` (JSON) and :func:`binary_frame` (MessagePack) build them once
per push and each member's transport gets
those bytes, with no per-member framing.

:class:`RawSink` is the transport of one accepted WebSocket, found through the
``realtime_dispatch.raw_transport`` ASGI scope extension that :class:`~.server.HubWebSocketProtocol`
adds. Under another server the extension is absent and records go through the ASGI ``send``.
The server calls its ``watcher`` (:meth:`RawSink.watch`) whenever :meth:`RawSink.open` may have
changed: the connection keeps its direct-write flag by it
(:attr:`~.connection.HubConnection.direct`).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Mapping
from typing import Any, Protocol

RAW_TRANSPORT_EXTENSION = "realtime_dispatch.raw_transport"
_FIN_TEXT = 0x81
_FIN_BINARY = 0x82
_LEN16 = struct.Struct("!BBH")
_LEN64 = struct.Struct("!BBQ")


_SHORT_TEXT = [bytes((_FIN_TEXT, size)) for size in range(126)]
_SHORT_BINARY = [bytes((_FIN_BINARY, size)) for size in range(126)]
"""The two-byte headers of the frames of under 126 bytes, built once."""


def _framed(head: int, short: list[bytes], payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        return short[size] + payload
    if size < 1 << 16:
        return _LEN16.pack(head, 126, size) + payload
    return _LEN64.pack(head, 127, size) + payload


def text_frame(payload: bytes) -> bytes:
    """One final, unmasked text frame carrying ``payload`` (UTF-8 JSON records)."""
    return _framed(_FIN_TEXT, _SHORT_TEXT, payload)


def binary_frame(payload: bytes) -> bytes:
    """One final, unmasked binary frame carrying ``payload`` (MessagePack records)."""
    return _framed(_FIN_BINARY, _SHORT_BINARY, payload)


def ws_frame(payload: bytes, *, binary: bool) -> bytes:
    """:func:`binary_frame` or :func:`text_frame` of ``payload``."""
    return binary_frame(payload) if binary else text_frame(payload)


def records_frame(records: list[bytes], *, binary: bool) -> bytes:
    """One frame carrying whole ``records`` (of a binary protocol or not), in order."""
    return ws_frame(records[0] if len(records) == 1 else b"".join(records), binary=binary)


class Flag(Protocol):
    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class _ServerSide(Protocol):
    """What :class:`RawSink` reads of the WebSocket protocol object: uvicorn's, or the hub's
    own (:class:`~.ws_direct.DirectWebSocket`)."""

    @property
    def transport(self) -> asyncio.Transport: ...

    @property
    def writable(self) -> Flag: ...

    @property
    def close_sent(self) -> bool: ...

    watcher: Callable[[], None] | None
    """Called, once set, whenever ``writable``, ``close_sent`` or the transport's closing
    changes: paused, resumed, a close frame sent or received, the peer's end, the transport
    closed or lost."""


class RawSink:
    """Writes whole frames to one WebSocket's transport; ``open`` tells whether it may now."""

    __slots__ = ("_server", "transport")

    def __init__(self, server: _ServerSide) -> None:
        self._server = server
        self.transport = server.transport

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any]) -> RawSink | None:
        extension = scope.get("extensions", {}).get(RAW_TRANSPORT_EXTENSION)
        if not extension:
            return None
        return cls(extension["server"])

    def open(self) -> bool:
        """True while frames may be written now: no close sent, no backpressure."""
        server = self._server
        return (
            not server.close_sent and server.writable.is_set() and not self.transport.is_closing()
        )

    def watch(self, callback: Callable[[], None] | None) -> None:
        """Have ``callback`` called whenever :meth:`open` may have changed (None: no more)."""
        self._server.watcher = callback

    def closed(self) -> bool:
        return self._server.close_sent or self.transport.is_closing()

    async def drained(self) -> None:
        """Wait until the transport takes writes again (uvicorn's pause/resume_writing)."""
        await self._server.writable.wait()
