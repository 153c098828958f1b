"""What carries a connection (:class:`Transport`) and what it speaks (:class:`HubProtocol`): the
two seams of the hub's wire, each a value a connection holds once, from its handshake on.

* Transports: WebSockets, Server-Sent Events, long polling (SignalR's transport protocol). SSE
  carries text only; the other two carry text and binary.
* Hub protocols: ``json`` (:mod:`.protocol`) and ``messagepack`` (:mod:`.messagepack`). The
  handshake is JSON text for both. Pushes reach the hub as JSON records; a protocol's
  :attr:`HubProtocol.from_json` turns the records of one push into its own, once per push
  whatever the number of members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from realtime_dispatch.hub.wire import messagepack, protocol
from realtime_dispatch.hub.wire.protocol import ClientMessage
from realtime_dispatch.values.json_types import JsonValue


class Transport(Enum):
    """The values are the names negotiate lists (and the ``transport`` of log events)."""

    WEBSOCKETS = "WebSockets"
    SERVER_SENT_EVENTS = "ServerSentEvents"
    LONG_POLLING = "LongPolling"

    @property
    def binary(self) -> bool:
        """Whether the transport carries the ``Binary`` transfer format."""
        return self is not Transport.SERVER_SENT_EVENTS

    @property
    def transfer_formats(self) -> list[str]:
        # Text first: signalrcore picks MessagePack when Binary comes first.
        return ["Text", "Binary"] if self.binary else ["Text"]


@dataclass(frozen=True, slots=True, eq=False)
class HubProtocol:
    name: str
    binary: bool
    """Records are binary (WebSocket binary frames, ``application/octet-stream`` bodies)."""
    ping: bytes
    close: Callable[[str | None, bool], bytes]
    completion_error: Callable[[str, str], bytes]
    completion: Callable[[str, JsonValue], bytes]
    """A successful completion of an invocation, with its result (None: void)."""
    ack: Callable[[int], bytes]
    sequence: Callable[[int], bytes]
    parse: Callable[[bytes], ClientMessage | None]
    from_json: Callable[[Sequence[bytes]], list[bytes]] | None
    """Records of this protocol for JSON records (None: they are JSON records already)."""


def _json_close(error: str | None, allow_reconnect: bool) -> bytes:
    return protocol.close_message(error, allow_reconnect=allow_reconnect).encode()


def _json_parse(record: bytes) -> ClientMessage | None:
    return protocol.parse_message(protocol.decode_frame(record))


def _msgpack_close(error: str | None, allow_reconnect: bool) -> bytes:
    return messagepack.close_message(error, allow_reconnect=allow_reconnect)


JSON = HubProtocol(
    name="json",
    binary=False,
    ping=protocol.PING.encode(),
    close=_json_close,
    completion_error=lambda invocation_id, error: protocol.completion_error(
        invocation_id, error
    ).encode(),
    completion=lambda invocation_id, result: protocol.completion(invocation_id, result).encode(),
    ack=lambda sequence_id: protocol.ack_message(sequence_id).encode(),
    sequence=lambda sequence_id: protocol.sequence_message(sequence_id).encode(),
    parse=_json_parse,
    from_json=None,
)

MESSAGEPACK = HubProtocol(
    name="messagepack",
    binary=True,
    ping=messagepack.PING,
    close=_msgpack_close,
    completion_error=messagepack.completion_error,
    completion=messagepack.completion,
    ack=messagepack.ack_message,
    sequence=messagepack.sequence_message,
    parse=messagepack.parse_message,
    from_json=messagepack.records_from_json,
)

PROTOCOLS = {p.name: p for p in (JSON, MESSAGEPACK)}
