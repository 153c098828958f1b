"""The fan-out's paths to a connection: a batch to one group written at once to members whose
transport takes writes, and queued for the others (paused transport, records waiting, replay
buffer), with the same bytes, the same numbering and the same order as through ``offer``."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import ormsgpack

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub import Hub, HubOptions
from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import InboundSession
from realtime_dispatch.hub.wire.framing import RawSink, binary_frame, text_frame
from realtime_dispatch.hub.wire.messagepack import records_from_json
from realtime_dispatch.hub.wire.protocol import push_record

GROUP = "chat:fanout"


@dataclass
class Socket:
    """A WebSocket's server side and its transport in one (what a :class:`RawSink` reads),
    keeping what is written to it."""

    writes: list[bytes] = field(default_factory=list)
    writable: asyncio.Event = field(default_factory=asyncio.Event)
    close_sent: bool = False

    @property
    def transport(self) -> Socket:
        return self

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self.writes.append(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.close_sent


def connection(
    hub: Hub, index: int, *, protocol: str = "json", stateful: bool = False
) -> tuple[HubConnection, Socket]:
    """A registered member of :data:`GROUP`, its handshake done, at most 4 records queued."""
    session = InboundSession(max_record_chars=1 << 15, stateful_allowed=stateful)
    opened = session.feed(b'{"protocol":"%s","version":1}\x1e' % protocol.encode())
    assert opened.handshake is not None
    limits = ConnectionLimits(max_pending=4)
    outbound = Outbound(
        stateful=stateful, max_pending=limits.max_pending, max_replay_chars=limits.max_replay_chars
    )
    user = Identity(uuid.uuid4(), expires_at=time.time() + 3600)
    made = HubConnection(
        connection_id=f"c{index}", token=f"t{index}", identity=user, session=session,
        outbound=outbound, limits=limits, on_sent=hub.sent_counter(), now=0.0,
    )  # fmt: skip
    socket = Socket()
    socket.writable.set()
    made.sink = RawSink(socket)  # type: ignore[arg-type]
    hub.new_connection(made)
    hub.registry.join(made.connection_id, GROUP)
    return made, socket


def records(count: int, start: int = 0) -> list[bytes]:
    return [push_record("message_received", b'{"seq":%d}' % n) for n in range(start, count)]


def hub() -> Hub:
    return Hub(HubOptions(), pool=None, dsn="postgresql://unused/unused")


async def test_a_batch_to_one_group_is_one_write_per_member_numbered_as_sent() -> None:
    made = hub()
    members = [connection(made, index) for index in range(3)]
    batch = records(3)
    assert made.send_to_groups([(GROUP, record) for record in batch]) == 9
    for member, server in members:
        assert server.writes == [b"".join(text_frame(r) for r in batch)]
        assert member.outbound.pending == 0
        assert member.outbound.rewind() == 4  # three records numbered, none kept


async def test_a_paused_member_gets_the_batch_queued_in_order_and_the_others_at_once() -> None:
    made = hub()
    (fast, fast_server), (paused, paused_server) = connection(made, 0), connection(made, 1)
    paused_server.writable.clear()
    first, second = records(2), records(4, start=2)
    made.send_to_groups([(GROUP, record) for record in first])
    paused_server.writable.set()
    made.send_to_groups([(GROUP, record) for record in second])  # behind what waits
    assert paused_server.writes == []
    assert paused.due() == first + second
    assert fast_server.writes == [
        b"".join(text_frame(r) for r in first),
        b"".join(text_frame(r) for r in second),
    ]
    assert fast.closing is None


async def test_a_member_past_its_bound_is_closed_as_too_slow() -> None:
    made = hub()
    (slow, server), (other, _) = connection(made, 0), connection(made, 1)
    server.writable.clear()
    made.send_to_groups([(GROUP, record) for record in records(5)])  # max_pending is 4
    assert slow.closing is not None
    assert other.closing is None


async def test_a_stateful_member_keeps_each_record_for_replay() -> None:
    made = hub()
    member, server = connection(made, 0, stateful=True)
    batch = records(2)
    made.send_to_groups([(GROUP, record) for record in batch])
    assert server.writes == [b"".join(text_frame(r) for r in batch)]
    assert member.outbound.rewind() == 1
    assert member.due() == batch  # replayed on a new transport


async def test_messagepack_members_share_one_encoding_of_the_batch() -> None:
    made = hub()
    (_, json_server), (_, pack_server), (_, pack_server2) = (
        connection(made, 0),
        connection(made, 1, protocol="messagepack"),
        connection(made, 2, protocol="messagepack"),
    )
    batch = records(2)
    made.send_to_groups([(GROUP, record) for record in batch])
    packed = b"".join(binary_frame(r) for r in records_from_json(batch))
    assert json_server.writes == [b"".join(text_frame(r) for r in batch)]
    assert pack_server.writes == pack_server2.writes == [packed]
    body = records_from_json(batch)[0]
    assert ormsgpack.unpackb(body[1:])[3] == "message_received"


async def test_a_batch_to_several_groups_is_still_one_write_per_member() -> None:
    made = hub()
    member, server = connection(made, 0)
    made.registry.join(member.connection_id, "chat:other")
    one, two = records(1), records(2, start=1)
    made.send_to_groups([(GROUP, one[0]), ("chat:other", two[0])])
    assert server.writes == [text_frame(one[0]) + text_frame(two[0])]


def test_write_through_numbers_only_when_nothing_waits() -> None:
    outbound = Outbound(stateful=False, max_pending=4, max_replay_chars=1 << 20)
    assert outbound.write_through(3)
    assert outbound.pending == 0
    outbound.push_control(b"ping")
    assert not outbound.write_through(1)
    outbound.take(1 << 16)
    assert outbound.push(b"queued")
    assert not outbound.write_through(1)
    assert not Outbound(stateful=True, max_pending=4, max_replay_chars=64).write_through(1)
