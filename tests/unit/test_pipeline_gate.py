"""A connection's flow control for pipelined requests, apart from its I/O
(:class:`realtime_dispatch.edge.pipelining.PipelineGate`): a real parser is fed, the
socket is a recorder of pauses and resumes. The protocol's use of it over real connections is
tests/integration/test_http_pipelined_requests.py."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import httptools

from realtime_dispatch.edge.pipelining import GatedFlow, PipelineGate

DEPTH = 8


def get(n: int) -> bytes:
    return b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % n


class Socket:
    """The transport's reading switch, recorded."""

    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Connection:
    """A parser behind the gate: the requests it parsed (their paths, read before their heads
    are complete), and how many of them are answered."""

    def __init__(self) -> None:
        self.socket = Socket()
        self.flow = GatedFlow(self.socket)  # type: ignore[arg-type]
        self.gate = PipelineGate(self.flow, deque(), DEPTH)
        self.parser = httptools.HttpRequestParser(self)
        self.paths: list[bytes] = []
        self.heads = 0
        self.answered = 0
        self.going = True

    def on_url(self, url: bytes) -> None:
        self.paths.append(url)

    def on_headers_complete(self) -> None:
        self.heads += 1  # a request parsed: uvicorn makes its cycle here

    def feed(self, data: bytes) -> bool:
        self.parser.feed_data(data)
        return self.going

    def unanswered(self) -> int:
        return self.heads - self.answered

    def read(self, data: bytes) -> None:
        self.gate.received(data, self.feed, self.unanswered)

    def answer(self) -> bool:
        self.answered += 1
        return self.gate.take_held(self.feed, self.unanswered)


def paths(first: int, last: int) -> list[bytes]:
    return [b"/%d" % n for n in range(first, last)]


def test_a_read_is_parsed_up_to_the_depth_and_the_rest_held() -> None:
    conn = Connection()
    data = b"".join(get(n) for n in range(20))
    conn.read(data)
    assert conn.paths == paths(0, DEPTH)
    assert conn.gate.held is data
    assert data[conn.gate.held_at :] == b"".join(get(n) for n in range(DEPTH, 20))
    assert conn.flow.held
    assert conn.flow.read_paused
    assert not conn.socket.reading
    conn.flow.resume_reading()  # as uvicorn does when a response ends: kept paused
    assert not conn.socket.reading


def test_answers_make_room_one_request_each_until_nothing_is_held() -> None:
    conn = Connection()
    conn.read(b"".join(get(n) for n in range(DEPTH + 3)))
    assert [conn.answer() for _ in range(3)] == [False, False, True]
    assert conn.paths == paths(0, DEPTH + 3)
    assert conn.gate.held is None
    assert not conn.flow.held
    conn.flow.resume_reading()  # the protocol resumes once nothing is held
    assert conn.socket.reading


def test_reads_while_held_are_kept_in_order() -> None:
    conn = Connection()
    conn.read(b"".join(get(n) for n in range(10)))
    conn.read(get(10) + get(11)[:7])
    conn.read(get(11)[7:] + get(12))
    assert conn.paths == paths(0, DEPTH)
    assert not conn.socket.reading
    while conn.gate.held is not None:
        conn.answer()
    assert conn.paths == paths(0, 13)
    assert conn.unanswered() == DEPTH


def test_a_head_end_split_across_reads_counts_once() -> None:
    conn = Connection()
    conn.answered = -(DEPTH - 1)  # as if seven were queued: room for one more
    request = get(0) + get(1)
    split = len(get(0)) - 2  # the first head's CR LF CR LF split in two reads
    conn.read(request[:split])
    conn.read(request[split:])
    assert conn.paths == [b"/0"]
    assert conn.gate.held is not None
    assert conn.gate.held[conn.gate.held_at :] == get(1)


def test_no_more_is_fed_once_the_rest_is_not_the_parsers() -> None:
    conn = Connection()
    conn.going = False  # upgraded, or ending, after the first piece
    conn.read(b"".join(get(n) for n in range(20)))
    assert conn.paths == paths(0, DEPTH)
    assert conn.gate.held is None
    assert conn.socket.reading


def test_what_is_held_is_not_fed_while_the_parser_is_being_fed() -> None:
    conn = Connection()
    conn.read(b"".join(get(n) for n in range(DEPTH + 1)))
    conn.gate.feeding = True  # a response ended in the parser's callbacks
    conn.answered = DEPTH
    assert not conn.gate.take_held(conn.feed, conn.unanswered)
    assert conn.paths == paths(0, DEPTH)
    conn.gate.feeding = False
    assert conn.gate.take_held(conn.feed, conn.unanswered)
    assert conn.paths == paths(0, DEPTH + 1)


class Cycle:
    def __init__(self, *, complete: bool = False) -> None:
        self.response_complete = complete
        self.disconnected = False
        self.message_event = asyncio.Event()


def test_the_requests_unanswered_are_the_queued_and_the_one_answered() -> None:
    queue: deque[tuple[Any, Any]] = deque()
    gate = PipelineGate(GatedFlow(Socket()), queue, DEPTH)  # type: ignore[arg-type]
    assert gate.unanswered(None, direct_open=False) == 0
    assert gate.unanswered(Cycle(complete=True), direct_open=False) == 0
    assert gate.unanswered(Cycle(), direct_open=False) == 1
    assert gate.unanswered(None, direct_open=True) == 1
    queue.extend([(Cycle(), None), (Cycle(), None)])
    assert gate.unanswered(Cycle(complete=True), direct_open=False) == 3
    assert gate.unanswered(None, direct_open=True) == 3


def test_a_cut_tells_every_request_not_answered_and_drops_the_queue() -> None:
    socket = Socket()
    queue: deque[tuple[Any, Any]] = deque()
    gate = PipelineGate(GatedFlow(socket), queue, DEPTH)  # type: ignore[arg-type]
    answering, current, done = Cycle(), Cycle(), Cycle(complete=True)
    queued = [Cycle(), Cycle()]
    queue.extend((cycle, None) for cycle in queued)
    gate.answering = answering
    gate.take(b"".join(get(n) for n in range(20)), 0, lambda _: True, lambda: DEPTH)
    assert gate.held is not None
    gate.cut(current)
    assert gate.held is None
    assert not gate.flow.held
    assert not queue
    assert gate.answering is None
    for cycle in (answering, current, *queued):
        assert cycle.disconnected
        assert cycle.message_event.is_set()
    gate.cut(done)
    assert not done.disconnected
