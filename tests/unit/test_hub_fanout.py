"""The fan-out's paths to a connection: a batch to one group written at once to members whose
transport takes writes, and queued for the others (paused transport, records waiting, replay
buffer), with the same bytes and the same order as through ``offer``; and the connection's
direct-write flag (``HubConnection.direct``) that decides it, kept through pause and resume,
queued records, close frames and the transport's end."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import ormsgpack
import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.uri import parse_uri

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.hub import Hub, HubOptions
from realtime_dispatch.hub.connections.connection import ConnectionLimits, HubConnection
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest, InboundSession
from realtime_dispatch.hub.serving.server import HubWebSocketProtocol
from realtime_dispatch.hub.transports.ws_direct import DirectWebSocket
from realtime_dispatch.hub.wire.framing import RawSink, binary_frame, text_frame
from realtime_dispatch.hub.wire.messagepack import records_from_json
from realtime_dispatch.hub.wire.protocol import push_record
from support.procs import wait_until

GROUP = "chat:fanout"


@dataclass
class Socket:
    """A WebSocket's server side and its transport in one (what a :class:`RawSink` reads),
    keeping what is written to it. Like the hub's servers, it tells its ``watcher`` of every
    change: ``pause_writing``, ``resume_writing``, ``close``; ``high_water``: it pauses itself
    once that many bytes were written, as a transport does when its buffer fills."""

    writes: list[bytes] = field(default_factory=list)
    writable: asyncio.Event = field(default_factory=asyncio.Event)
    close_sent: bool = False
    closing: bool = False
    high_water: int | None = None
    watcher: Callable[[], None] | None = None

    @property
    def transport(self) -> Socket:
        return self

    def write(self, data: bytes) -> None:
        assert not self.closing, "written after the transport closed"
        self.writes.append(data)
        if self.high_water is not None and sum(map(len, self.writes)) >= self.high_water:
            self.pause_writing()

    def writelines(self, chunks: list[bytes]) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closing

    def pause_writing(self) -> None:
        self.writable.clear()
        self._changed()

    def resume_writing(self) -> None:
        self.writable.set()
        self._changed()

    def close(self) -> None:
        self.closing = True
        self._changed()

    def _changed(self) -> None:
        if self.watcher is not None:
            self.watcher()


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
    made.attach_sink(RawSink(socket))  # type: ignore[arg-type]
    hub.new_connection(made)
    hub.registry.join(made.connection_id, GROUP)
    return made, socket


def records(count: int, start: int = 0) -> list[bytes]:
    return [push_record("message_received", b'{"seq":%d}' % n) for n in range(start, count)]


def hub() -> Hub:
    return Hub(HubOptions(), pool=None, dsn="postgresql://unused/unused")


async def test_a_batch_to_one_group_is_one_write_per_member_nothing_kept() -> None:
    made = hub()
    members = [connection(made, index) for index in range(3)]
    batch = records(3)
    assert made.send_to_groups([(GROUP, record) for record in batch]) == 9
    for member, server in members:
        assert server.writes == [b"".join(text_frame(r) for r in batch)]
        assert member.outbound.pending == 0
        assert member.direct is server
        member.outbound.rewind()
        assert member.due() == []  # nothing kept for replay


async def test_a_paused_member_gets_the_batch_queued_in_order_and_the_others_at_once() -> None:
    made = hub()
    (fast, fast_server), (paused, paused_server) = connection(made, 0), connection(made, 1)
    paused_server.pause_writing()
    first, second = records(2), records(4, start=2)
    made.send_to_groups([(GROUP, record) for record in first])
    paused_server.resume_writing()
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
    server.pause_writing()
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


def test_records_write_through_only_when_nothing_waits() -> None:
    outbound = Outbound(stateful=False, max_pending=4, max_replay_chars=1 << 20)
    assert outbound.writes_through()
    outbound.push_control(b"ping")
    assert not outbound.writes_through()
    outbound.take(1 << 16)
    assert outbound.writes_through()
    assert outbound.push(b"queued")
    assert not outbound.writes_through()
    outbound.take(1 << 16)
    assert outbound.writes_through()
    assert not Outbound(stateful=True, max_pending=4, max_replay_chars=64).writes_through()
    assert not Outbound(stateful=False, max_pending=0, max_replay_chars=64).writes_through()


# --- the direct-write flag ----------------------------------------------------------------------


def drain(member: HubConnection, server: Socket) -> None:
    """What the connection's writer does once its transport takes writes: the queue written out
    in one frame per take, in order."""
    while member.outbound.has_pending():
        due = member.due()
        assert due is not None
        server.write(b"".join(text_frame(r) for r in due))
        member.wrote(len(due))


def pushes(made: Hub, start: int, count: int = 2) -> bytes:
    """``count`` numbered records sent to :data:`GROUP` as one batch; their frames joined."""
    batch = records(start + count, start=start)
    made.send_to_groups([(GROUP, record) for record in batch])
    return b"".join(text_frame(r) for r in batch)


async def test_a_transport_paused_by_a_write_gets_the_next_pushes_queued_and_in_order() -> None:
    made = hub()
    (member, server), (other, other_server) = connection(made, 0), connection(made, 1)
    server.high_water = 1  # the first write fills its buffer
    first = pushes(made, 0)
    assert server.writes == [first]
    assert member.direct is None  # paused by that write, before any other push
    second = pushes(made, 2)
    assert server.writes == [first]
    assert member.outbound.pending == 2
    server.high_water = None
    server.resume_writing()
    assert member.direct is None  # records still wait: the next push goes behind them
    third = pushes(made, 4)
    assert server.writes == [first]
    drain(member, server)
    assert member.direct is server  # the queue written out: writes at once again
    fourth = pushes(made, 6)
    assert b"".join(server.writes) == first + second + third + fourth
    assert b"".join(other_server.writes) == first + second + third + fourth
    assert member.closing is None
    assert other.direct is other_server


async def test_a_queued_control_record_keeps_pushes_behind_it() -> None:
    made = hub()
    member, server = connection(made, 0)
    member.send_control(b"ping\x1e")
    assert member.direct is None
    batch = pushes(made, 0)
    assert server.writes == []
    drain(member, server)
    assert server.writes == [text_frame(b"ping\x1e") + batch]
    assert member.direct is server


async def test_a_queued_reply_keeps_pushes_behind_it() -> None:
    made = hub()
    member, server = connection(made, 0)
    reply = b'{"type":3,"invocationId":"1","result":null}\x1e'
    member.send(reply)  # an answer to the client, queued for the writer
    assert member.direct is None
    batch = pushes(made, 0)
    assert server.writes == []
    drain(member, server)
    assert server.writes == [text_frame(reply) + batch]


async def test_a_closed_transport_or_closing_connection_is_written_nothing() -> None:
    made = hub()
    (closed, closed_server), (closing, closing_server) = connection(made, 0), connection(made, 1)
    closed_server.close()  # the transport closes under the connection (a close frame, its end)
    closing.close(CloseRequest(CloseReason.SHUTDOWN, None))
    assert closed.direct is None
    assert closing.direct is None
    pushes(made, 0)  # a write would fail the closed transport's assertion
    assert closed_server.writes == []
    assert closing_server.writes == []
    assert closing.outbound.take(1 << 16) == ([closing.protocol.close(None, False)], 0)


async def test_a_detached_transport_is_neither_written_nor_heard() -> None:
    made = hub()
    member, server = connection(made, 0)
    member.attach_sink(None)
    assert member.direct is None
    assert server.watcher is None
    server.resume_writing()  # no longer this connection's transport
    assert member.direct is None
    pushes(made, 0)
    assert server.writes == []
    again = Socket()
    again.writable.set()
    member.attach_sink(RawSink(again))  # type: ignore[arg-type]
    assert member.direct is None  # what was queued meanwhile goes first
    drain(member, again)
    assert member.direct is again


async def test_a_stateful_connection_never_writes_past_its_replay_buffer() -> None:
    made = hub()
    member, server = connection(made, 0, stateful=True)
    assert member.direct is None
    server.resume_writing()
    assert member.direct is None
    batch = records(2)
    made.send_to_groups([(GROUP, record) for record in batch])
    member.outbound.rewind()
    assert member.due() == batch


# --- the flag kept by the hub's WebSocket servers, on real transports --------------------------


def records_in(stream: bytes) -> list[bytes]:
    """The records of the server's (unmasked) whole frames in ``stream``, in order."""
    found = []
    while len(stream) > 2:
        size, start = stream[1] & 0x7F, 2
        if size == 126:
            size, start = int.from_bytes(stream[2:4]), 4
        elif size == 127:
            size, start = int.from_bytes(stream[2:10]), 10
        if len(stream) < start + size:
            break
        found += [r for r in stream[start : start + size].split(b"\x1e") if r]
        stream = stream[start + size :]
    return found


async def accepted(protocol: asyncio.Protocol) -> socket.socket:
    """``protocol`` served on one end of a socket pair; returns the other end (the client)."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, ours)
    return peer


async def direct_member(made: Hub) -> tuple[HubConnection, DirectWebSocket, socket.socket]:
    """A member of :data:`GROUP` served by the hub's own WebSocket on a socket pair, as once
    admitted; the client's end."""
    member, _ = connection(made, 0)
    server = DirectWebSocket(made, set())
    peer = await accepted(server)
    server.attach(member, None)
    assert member.direct is server.transport
    return member, server, peer


async def test_the_direct_socket_pauses_queues_and_resumes_in_order() -> None:
    """A client that stops reading: once the transport pauses, pushes queue; as it reads again,
    what waited is written first, then pushes are written at once again; every record once."""
    made = hub()
    member, server, peer = await direct_member(made)
    server.transport.set_write_buffer_limits(high=1 << 14)
    big = b"x" * (1 << 16)
    sent = 0
    while member.direct is not None and sent < 1000:  # until the socket's buffers are full
        made.send_to_groups([(GROUP, push_record("t", b'{"n":%d,"b":"%s"}' % (sent, big)))])
        sent += 1
    assert member.direct is None
    assert not server.writable.is_set()
    for _ in range(3):  # max_pending is 4: queued, not too slow
        made.send_to_groups([(GROUP, push_record("t", b'{"n":%d}' % sent))])
        sent += 1
    assert member.outbound.pending == 3
    loop, received = asyncio.get_running_loop(), bytearray()
    while member.direct is None:  # reading lets the transport resume, then drain its queue
        received += await asyncio.wait_for(loop.sock_recv(peer, 1 << 20), 5)
    assert member.outbound.pending == 0
    made.send_to_groups([(GROUP, push_record("t", b'{"n":%d}' % sent))])
    sent += 1
    while len(records_in(bytes(received))) < sent:
        received += await asyncio.wait_for(loop.sock_recv(peer, 1 << 20), 5)
    got = [orjson.loads(record)["arguments"][0]["n"] for record in records_in(bytes(received))]
    assert got == list(range(sent))
    peer.close()


async def test_the_direct_socket_ends_direct_writes_at_the_clients_end() -> None:
    made = hub()
    member, server, peer = await direct_member(made)
    server.eof_received()  # what the transport calls on the client's end, then closes itself
    assert member.direct is None
    assert server.transport.is_closing()
    peer.close()
    await wait_until(lambda: server.lost)
    assert member.direct is None
    assert member.sink is None


async def uvicorn_socket(made: Hub) -> tuple[HubWebSocketProtocol, socket.socket, RawSink]:
    """uvicorn's protocol as the hub's ASGI serving runs it, its handshake done with a client on
    a socket pair; the raw transport it hands to the app."""
    scopes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await scopes.put(scope)
        while (await receive())["type"] != "websocket.disconnect":
            pass

    config = uvicorn.Config(app, log_level="warning")
    config.load()
    server = HubWebSocketProtocol(config, ServerState(), {})
    peer = await accepted(server)
    client = ClientProtocol(parse_uri("ws://hub/hubs/messenger"))
    client.send_request(client.connect())
    await asyncio.get_running_loop().sock_sendall(peer, b"".join(client.data_to_send()))
    sink = RawSink.from_scope(await asyncio.wait_for(scopes.get(), 5))
    assert sink is not None
    return server, peer, sink


@pytest.mark.parametrize("end", ["close_frame", "eof", "close_sent", "pause"])
async def test_uvicorns_socket_ends_direct_writes_at_once(end: str) -> None:
    made = hub()
    member, _ = connection(made, 0)
    server, peer, sink = await uvicorn_socket(made)
    member.attach_sink(sink)
    assert member.direct is sink.transport
    if end == "close_frame":
        close = ClientProtocol(parse_uri("ws://hub/"), state=State.OPEN)
        close.send_close(1000)
        server.data_received(b"".join(close.data_to_send()))
    elif end == "eof":
        server.eof_received()
    elif end == "close_sent":
        server.close_sent = True  # as uvicorn sets it wherever it sends a close frame
    else:
        server.pause_writing()
    assert member.direct is None
    if end == "pause":
        server.resume_writing()
        assert member.direct is sink.transport
    peer.close()
    await wait_until(lambda: server.disconnected)
    assert member.direct is None
