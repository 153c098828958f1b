"""What a connection does with the data a client sends: a sans-I/O state machine.

:class:`InboundSession` takes raw frames (WebSocket messages, HTTP POST bodies) and returns an
:class:`Inbound` describing what to do (handshake done or refused, completions to send, acks
received, close). It never raises for anything a client sends, so a fuzzer can throw arbitrary
bytes at it. Under stateful reconnect it numbers the client's sequenced messages, drops the
duplicates a client resends after a reconnect and tells the connection which sequence id to
acknowledge.

The handshake (JSON text, ended by ``\x1e``) names the hub protocol; from then on the session
reads that protocol's records (:mod:`.wire`). A binary protocol on a text-only transport
(MessagePack over Server-Sent Events) is refused in the handshake reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from realtime_dispatch.hub.wire.invocations import typing_json, typing_messagepack
from realtime_dispatch.hub.wire.messagepack import BinaryRecordBuffer
from realtime_dispatch.hub.wire.protocol import (
    SEQUENCED_TYPES,
    STATEFUL_RECONNECT_MIN_VERSION,
    Ack,
    Close,
    HandshakeRequest,
    Invocation,
    Other,
    ProtocolError,
    RecordBuffer,
    Sequence,
    decode_frame,
    parse_handshake,
    parse_message,
)
from realtime_dispatch.hub.wire.protocols import JSON, PROTOCOLS, HubProtocol

_PROTOCOL_NAMES = frozenset(PROTOCOLS)
HUB_METHODS = frozenset({"Typing", "WatchPresence", "UnwatchPresence"})
"""The methods a client may invoke; any other target is answered ``Unknown hub method``."""
_RS = b"\x1e"


class CloseReason(Enum):
    """Why a connection ends; the values are the bounded ``reason`` label of the metrics."""

    CLIENT_CLOSE = "client_close"
    TRANSPORT_LOST = "transport_lost"
    HANDSHAKE_FAILED = "handshake_failed"
    PROTOCOL_ERROR = "protocol_error"
    MESSAGE_TOO_BIG = "message_too_big"
    IDLE_TIMEOUT = "idle_timeout"
    SLOW_CONSUMER = "slow_consumer"
    SHUTDOWN = "shutdown"
    RESUME_EXPIRED = "resume_expired"
    SERVER_ERROR = "server_error"
    TOKEN_EXPIRED = "token_expired"
    TOKEN_REVOKED = "token_revoked"


@dataclass(frozen=True, slots=True)
class CloseRequest:
    reason: CloseReason
    error: str | None
    allow_reconnect: bool = False


@dataclass(slots=True)
class Inbound:
    handshake: HandshakeRequest | None = None
    handshake_reply_error: str | None = None
    replies: list[bytes] = field(default_factory=list)
    """Records to send back, in the session's protocol."""
    invocations: list[Invocation] = field(default_factory=list)
    """Invocations of the hub's methods (:data:`HUB_METHODS`), for the connection to run."""
    acked: int | None = None
    ack_to_send: int | None = None
    close: CloseRequest | None = None


class InboundSession:
    """Inbound protocol state of one hub connection (kept across transports on resume)."""

    __slots__ = (
        "_binary",
        "_buffer",
        "_head",
        "_last_acked_sent",
        "_latest_received",
        "_max",
        "_next_receiving",
        "binary_allowed",
        "handshake",
        "protocol",
        "stateful_allowed",
    )

    def __init__(
        self, *, max_record_chars: int, stateful_allowed: bool, binary_allowed: bool = True
    ) -> None:
        self._max = max_record_chars
        self._buffer = RecordBuffer(max_record_chars)
        self._binary: BinaryRecordBuffer | None = None
        self._head = b""
        self.stateful_allowed = stateful_allowed
        self.binary_allowed = binary_allowed
        """Whether the transport carries binary records (all but Server-Sent Events)."""
        self.handshake: HandshakeRequest | None = None
        self.protocol: HubProtocol = JSON
        """The hub protocol the handshake named (JSON until then)."""
        self._next_receiving = 1
        self._latest_received = 0
        self._last_acked_sent = 0

    @property
    def stateful(self) -> bool:
        return (
            self.stateful_allowed
            and self.handshake is not None
            and self.handshake.version >= STATEFUL_RECONNECT_MIN_VERSION
        )

    def new_transport(self) -> None:
        """A resumed connection starts a fresh byte stream."""
        self._buffer.clear()
        if self._binary is not None:
            self._binary.clear()

    def lone_typing(self, data: str | bytes) -> Invocation | None:
        """The ``Typing`` invocation that ``data`` is, whole, when the handshake is done and
        nothing is buffered before it (:mod:`.wire.invocations`); None for anything else, which
        :meth:`feed` reads. Reading it changes no state."""
        if self.handshake is None:
            return None
        binary = self._binary
        if binary is None:
            return None if self._buffer.holds_partial() else typing_json(data, self._max)
        if isinstance(data, bytes) and not binary.holds_partial():
            return typing_messagepack(data, self._max)
        return None

    def lone_ping(self, data: str | bytes) -> bool:
        """True when ``data`` is exactly one ``Ping`` record of the session's protocol, the
        handshake done, nothing buffered before it and no acknowledgement due: what :meth:`feed`
        would read as nothing to do (a ping is neither numbered nor answered). A client sends
        one every 10 s, so a replica reads one every 10 ms per thousand connections."""
        if self.handshake is None or data != self.protocol.ping:
            return False
        binary = self._binary
        partial = self._buffer.holds_partial() if binary is None else binary.holds_partial()
        return not partial and self._latest_received == self._last_acked_sent

    def feed(self, data: str | bytes) -> Inbound:
        invocation = self.lone_typing(data)  # the fast path: a lone ``Typing`` invocation record
        if invocation is not None:
            return self._typing(invocation)
        return self.feed_records(data)

    def feed_records(self, data: str | bytes) -> Inbound:
        """:meth:`feed` without its fast path: for data :meth:`lone_typing` has turned down."""
        binary = self._binary
        result = Inbound()
        if self.handshake is None:
            rest = self._feed_handshake(data, result)
            if rest is None:
                return result
            data = rest
            binary = self._binary
        try:
            records: list[str] | list[bytes] = (
                self._buffer.feed(decode_frame(data))
                if binary is None
                else binary.feed(data.encode() if isinstance(data, str) else data)
            )
        except ProtocolError as exc:
            self._fail(result, exc)
            return result
        for record in records:
            try:
                self._message(record, result)
            except ProtocolError as exc:
                self._fail(result, exc)
            if result.close is not None:
                break
        self._ack(result)
        return result

    def _typing(self, invocation: Invocation) -> Inbound:
        """What :meth:`feed` answers for one whole ``Typing`` record (read by
        :mod:`.wire.invocations`): the same as the general path's."""
        if not self.stateful:  # nothing numbered, nothing to acknowledge
            return Inbound(invocations=[invocation])
        result = Inbound()
        if not self._is_duplicate():
            result.invocations.append(invocation)
        self._ack(result)
        return result

    def _ack(self, result: Inbound) -> None:
        if self._latest_received > self._last_acked_sent and result.close is None:
            self._last_acked_sent = self._latest_received
            result.ack_to_send = self._latest_received

    def _feed_handshake(self, data: str | bytes, result: Inbound) -> str | bytes | None:
        """Take the handshake record; what follows it, or None when there is nothing more to
        read now (handshake incomplete, or refused: ``result`` says so)."""
        raw = data.encode() if isinstance(data, str) else data
        head = self._head + raw if self._head else raw
        end = head.find(_RS)
        if end < 0:
            if len(head) > self._max:
                self._fail(result, ProtocolError("Handshake message too big.", code="TooBig"))
            else:
                self._head = head
            return None
        self._head = b""
        try:
            try:
                text = head[:end].decode()
            except UnicodeDecodeError as exc:
                raise ProtocolError("handshake is not valid UTF-8", code="InvalidUtf8") from exc
            handshake = parse_handshake(text, _PROTOCOL_NAMES)
            protocol = PROTOCOLS[handshake.protocol]
            if protocol.binary and not self.binary_allowed:
                raise ProtocolError(
                    f"Cannot use the '{protocol.name}' protocol on the current transport: "
                    "it does not support the 'Binary' transfer format.",
                    code="Unsupported",
                )
        except ProtocolError as exc:
            self._fail(result, exc)
            return None
        self.handshake = result.handshake = handshake
        self.protocol = protocol
        if protocol.binary:
            self._binary = BinaryRecordBuffer(self._max)
        rest = head[end + 1 :]
        return rest if rest else None

    def _fail(self, result: Inbound, exc: ProtocolError) -> None:
        if self.handshake is None:
            result.handshake_reply_error = str(exc)
            result.close = CloseRequest(CloseReason.HANDSHAKE_FAILED, str(exc))
        elif exc.code == "MessageTooBig":
            result.close = CloseRequest(
                CloseReason.MESSAGE_TOO_BIG, "Connection closed with an error: message too big."
            )
        else:
            result.close = CloseRequest(
                CloseReason.PROTOCOL_ERROR, f"Connection closed with an error: {exc}."
            )

    def _is_duplicate(self) -> bool:
        """Number a sequenced message; True when the client resent one we already had."""
        if not self.stateful:
            return False
        current = self._next_receiving
        self._next_receiving += 1
        if current <= self._latest_received:
            return True
        self._latest_received = current
        return False

    def _message(self, record: str | bytes, result: Inbound) -> None:
        message = parse_message(record) if isinstance(record, str) else self.protocol.parse(record)
        if message is None:
            return
        match message:
            case Invocation(target=target, invocation_id=invocation_id):
                if self._is_duplicate():
                    return
                if target in HUB_METHODS:
                    result.invocations.append(message)
                    return
                if invocation_id is None:
                    return
                result.replies.append(
                    self.protocol.completion_error(
                        invocation_id, f"Unknown hub method '{target[:64]}'."
                    )
                )
            case Other(type=kind):
                if kind in SEQUENCED_TYPES:
                    self._is_duplicate()
            case Ack(sequence_id=sequence_id):
                if self.stateful:
                    result.acked = sequence_id
            case Sequence(sequence_id=sequence_id):
                if not self.stateful:
                    return
                if sequence_id > self._next_receiving:
                    raise ProtocolError(
                        "sequence id is ahead of the messages received", code="InvalidSequence"
                    )
                self._next_receiving = sequence_id
            case Close():
                result.close = CloseRequest(CloseReason.CLIENT_CLOSE, None)
