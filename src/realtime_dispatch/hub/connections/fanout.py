"""The fan-out of serialised records to the members of groups on this replica: :class:`Fanout`,
the encode-run-offer-flush path every push and every signal takes to its connections.

Each record is framed once. Consecutive records for the same group are a run: their frames are
joined once, and every member without stateful reconnect gets the run as that one piece.
Members speaking another protocol than JSON (MessagePack) get the run re-encoded once for all of
them (:func:`_encode_run`); while some connection does, a run is framed in each protocol only
on the first member that speaks it (:class:`_Runs`). What is due to one connection is written
to its transport in one call at the end (:meth:`~.connection.HubConnection.flush`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog
from prometheus_client import Counter

from realtime_dispatch.hub.connections.connection import HubConnection
from realtime_dispatch.hub.connections.lifetime import Lifetimes
from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.wire.framing import binary_frame, text_frame
from realtime_dispatch.hub.wire.protocol import ProtocolError
from realtime_dispatch.hub.wire.protocols import JSON, HubProtocol

log = structlog.get_logger(__name__)

GroupFrames = Sequence[tuple[str, bytes]]
"""``(group, serialised record)`` pairs, in order: what a publisher hands over."""

EncodedRun = tuple[list[bytes], list[bytes], bytes]
"""A run of one group's records in one protocol: records, their WebSocket frames, joined."""


class Fanout:
    def __init__(self, lifetimes: Lifetimes, registry: GroupRegistry, sent: Counter) -> None:
        self._lifetimes = lifetimes
        self._connections = lifetimes.connections
        self._expiry = lifetimes.expiry
        self._members_of = registry.members
        self._sent = sent
        """The frames written (``realtime_hub_sent_frames_total``)."""

    def send_to_group(self, group: str, record: bytes | str) -> int:
        """Send one serialised record to every member on this replica; returns how many."""
        if isinstance(record, str):
            record = record.encode()
        return self.send_to_groups(((group, record),))

    def send_to_groups(self, items: GroupFrames) -> int:
        """Send serialised records, in order, to their groups' members on this replica; returns
        how many deliveries were made.

        Connections whose token has expired are closed first (one comparison per call, none
        per member), so nothing is delivered to them even if the expiry timer is late; this
        holds for every transport, as a closing connection takes no more records.
        """
        expiry = self._expiry
        if expiry.queue.next_at <= time.time():
            expiry.run_due()
        count = len(items)
        if not count:
            return 0
        members_of = self._members_of
        group = items[0][0]
        end = 1
        while end < count and items[end][0] == group:
            end += 1
        if end == count:  # one run (a batch to one group): each member gets it once, at once
            members = members_of(group)
            if not members:
                return 0
            return self._write_run(members, [record for _, record in items])
        touched: list[HubConnection] = []
        deliveries = 0
        start = 0
        while start < count:
            group = items[start][0]
            end = start + 1
            while end < count and items[end][0] == group:
                end += 1
            members = members_of(group)
            if members:
                records = [record for _, record in items[start:end]]
                deliveries += self._offer_run(members, records, touched)
            start = end
        self._flush(touched)
        return deliveries

    def send_to_members(self, members: Sequence[str], record: bytes) -> int:
        """:meth:`send_to_groups` of one record to some of a group's members (``user_typing``:
        every member but the typist's connections): a run of one, written through as a push's."""
        return self._write_run(members, [record])

    def count_sent(self, records: int) -> None:
        """Count frames a transport wrote on its own (a resumed connection's replay, say)."""
        self._sent.inc(records)

    def _offer_run(
        self, members: Sequence[str], records: list[bytes], touched: list[HubConnection]
    ) -> int:
        connections = self._connections
        if not self._lifetimes.not_json:  # every connection speaks JSON: no check per member
            frames, data = _text_run(records)
            for connection_id in members:
                connections[connection_id].offer(records, frames, data, touched)
        else:  # the run built once per protocol, on its first member
            runs = _Runs(records)
            last: HubProtocol | None = None
            run: EncodedRun | None = None
            for connection_id in members:
                connection = connections[connection_id]
                if connection.protocol is not last:  # members of a protocol often come in a row
                    last = connection.protocol
                    run = runs[last]
                if run is not None:
                    connection.offer(run[0], run[1], run[2], touched)
        return len(members) * len(records)

    def _write_run(self, members: Sequence[str], records: list[bytes]) -> int:
        """:meth:`_offer_run` and :meth:`_flush` of a delivery that is one run: a member whose
        transport takes writes, with nothing queued and no replay buffer, has the run written at
        once (what ``offer`` and ``flush`` would do, without the batch); the others are offered
        it. While some connection speaks another protocol than JSON, the members are taken
        protocol by protocol, each protocol's run built once."""
        if not members:
            return 0
        connections = self._connections
        size = len(records)
        touched: list[HubConnection] = []
        now = connections[members[0]].loop.time()
        if self._lifetimes.not_json:
            by_protocol: dict[HubProtocol, list[str]] = {}
            for connection_id in members:
                protocol = connections[connection_id].protocol
                by_protocol.setdefault(protocol, []).append(connection_id)
            runs = _Runs(records)
            written = 0
            for protocol, ids in by_protocol.items():
                run = runs[protocol]
                if run is not None:
                    written += _write_through(
                        connections, ids, run, size=size, now=now, touched=touched
                    )
        else:
            run = (records, *_text_run(records))
            written = _write_through(connections, members, run, size=size, now=now, touched=touched)
        if written:
            self._sent.inc(written)
        self._flush(touched)
        return len(members) * size

    def _flush(self, touched: list[HubConnection]) -> None:
        if touched:
            loop_time = touched[0].loop.time()
            written = 0
            for connection in touched:
                written += connection.flush()
                connection.last_sent = loop_time
            self._sent.inc(written)


class _Runs(dict[HubProtocol, EncodedRun | None]):
    """A run of JSON records in each protocol its members speak (None: a record has no
    equivalent there, logged), each built once, on its first member: ``runs[protocol]``."""

    __slots__ = ("_records",)

    def __init__(self, records: list[bytes]) -> None:
        super().__init__()
        self._records = records

    def __missing__(self, protocol: HubProtocol) -> EncodedRun | None:
        records = self._records
        if protocol is JSON:
            run: EncodedRun | None = (records, *_text_run(records))
        else:
            run = _encode_run(protocol, records)
        self[protocol] = run
        return run


def _write_through(
    connections: dict[str, HubConnection],
    members: Sequence[str],
    run: EncodedRun,
    *,
    size: int,
    now: float,
    touched: list[HubConnection],
) -> int:
    """:meth:`Fanout._write_run`'s loop over members of one protocol: the run written to each
    transport that takes it now, offered to the others; returns the records written.

    This loop is the hub's Python per member and per push, so it does as little as it can:
    the loop's time is read once by the caller, no member's protocol is looked at here, and
    whether a member takes the run at once is one attribute,
    :attr:`~.connection.HubConnection.direct` (its transport, kept by the connection)."""
    records, frames, data = run
    written = 0
    for connection_id in members:
        connection = connections[connection_id]
        transport = connection.direct
        if transport is None:
            connection.offer(records, frames, data, touched)
            continue
        transport.write(data)
        connection.last_sent = now
        written += size
    return written


def _text_run(records: list[bytes]) -> tuple[list[bytes], bytes]:
    """The text frames of a run of JSON records, and those frames joined."""
    frames = [text_frame(record) for record in records]
    return frames, frames[0] if len(frames) == 1 else b"".join(frames)


def _encode_run(protocol: HubProtocol, records: list[bytes]) -> EncodedRun | None:
    """A run of JSON records in ``protocol``, framed as binary WebSocket frames; None (logged)
    when a record has no equivalent there."""
    if protocol.from_json is None:
        raise ValueError(f"{protocol.name} records are JSON records")
    try:
        encoded = protocol.from_json(records)
    except ProtocolError as exc:
        log.warning("hub_push_not_encodable", protocol=protocol.name, code=exc.code)
        return None
    frame = binary_frame if protocol.binary else text_frame
    frames = [frame(record) for record in encoded]
    return encoded, frames, frames[0] if len(frames) == 1 else b"".join(frames)
