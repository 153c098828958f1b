"""How far a connection's requests are parsed ahead of their answers (:mod:`.http_protocol`):
:func:`parseable`, :class:`GatedFlow` and :class:`PipelineGate`.

HTTP/1.1 lets a client send requests without waiting for their answers (pipelining), the
answers going back in order. uvicorn's protocol parses whatever it reads: every request in a
read becomes a request cycle queued behind the one being answered, and each answer resumes
reading, so one connection writing small requests faster than they are answered grows the
server without bound. Here a connection has at most ``max_pipelined`` requests parsed and not
yet answered (:attr:`~.http_limits.HttpLimits.max_pipelined`); the bytes read past them are held
unparsed, reading is paused, and they are parsed as answers go out.

Where to stop needs no parse: llhttp (as the protocol configures it) accepts a request head only
when it ends with an empty line, ``CR LF CR LF`` (a bare ``LF`` line end is refused), so a run
of bytes holding ``k`` of them completes at most ``k`` requests. Bytes of a body may hold some
too: that only makes a cut earlier than it had to be. Pure: the gate's only I/O is the flow's
pause and resume, and the parser it feeds is passed to each call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from uvicorn.protocols.http.flow_control import FlowControl

HEAD_END = b"\r\n\r\n"
TAIL = len(HEAD_END) - 1
"""Bytes kept of what was parsed last: a head end may straddle two reads."""

Feed = Callable[[bytes], bool]
"""Feeds the parser a piece of a read; False once the rest is not its own (ending, upgraded)."""


def parseable(data: bytes, start: int, tail: bytes, room: int) -> int:
    """Where the parser may be fed ``data`` from ``start`` up to (an index into ``data``) with at
    most ``room`` more requests completing: its end when it holds at most ``room`` head ends,
    else just past the ``room``-th; ``start`` when there is no room. ``tail``: the last bytes fed
    before (up to three), for a head end begun in them."""
    if room <= 0:
        return start
    found = 0
    at = start
    if tail:
        edge = (tail + data[start : start + TAIL]).find(HEAD_END)
        if 0 <= edge < len(tail):  # a head end begun in the previous bytes
            found = 1
            at = start + edge + len(HEAD_END) - len(tail)
            if found == room:
                return at
    if found + data.count(HEAD_END, at) <= room:
        return len(data)
    while True:
        at = data.find(HEAD_END, at) + len(HEAD_END)
        found += 1
        if found == room:
            return at


def last_bytes(tail: bytes, data: bytes, start: int, end: int) -> bytes:
    """The last :data:`TAIL` bytes once ``data[start:end]`` follows ``tail``."""
    if end - start >= TAIL:
        return data[end - TAIL : end]
    return (tail + data[start:end])[-TAIL:]


class GatedFlow(FlowControl):
    """uvicorn's flow control, with reading kept paused while the protocol holds bytes it read
    and may not parse yet (``held``): uvicorn resumes reading whenever a response ends or a
    request waits for its body, which would let a pipelining client's next reads in anyway."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__(transport)
        self.held = False

    def resume_reading(self) -> None:
        if not self.held:
            super().resume_reading()


class Cycle(Protocol):
    """What the gate reads and sets of a request cycle (uvicorn's ``RequestResponseCycle``)."""

    response_complete: bool
    disconnected: bool
    message_event: asyncio.Event


class PipelineGate:
    """A connection's flow control for pipelined requests: how many are parsed and not answered
    (:meth:`unanswered`), a read fed to the parser only up to ``depth`` of them (:meth:`take`),
    the rest held with reading paused and fed as answers make room (:meth:`received`,
    :meth:`take_held`), and every request of it cut when the connection ends (:meth:`cut`).

    ``queue``: the protocol's own queue of parsed requests waiting for the one being answered
    (uvicorn's ``pipeline``). The gate keeps nothing of the protocol: what it feeds and counts
    is passed to each call, so a closed connection leaves no reference cycle behind."""

    def __init__(self, flow: GatedFlow, queue: deque[tuple[Any, Any]], depth: int) -> None:
        self.flow = flow
        self.queue = queue
        self.depth = depth
        self.held: bytes | None = None
        """A read not parsed yet (past ``held_at``): the connection is at ``depth``."""
        self.held_at = 0
        self.tail = b""
        """The last bytes parsed (a request head's end may straddle two reads)."""
        self.feeding = False
        """The parser is being fed (a response ended in its callbacks must not feed it)."""
        self.answering: Any = None
        """The request cycle whose ASGI task was started last (uvicorn keeps no handle on it)."""

    def unanswered(self, current: Cycle | None, direct_open: bool) -> int:
        """Requests parsed and not answered yet: queued, being answered (or read). ``current``:
        the cycle parsed last; ``direct_open``: a direct request is being read or answered."""
        queued = len(self.queue)
        if direct_open:
            return queued + 1
        busy = current is not None and not current.response_complete
        return queued + (1 if queued or busy else 0)

    def received(self, data: bytes, feed: Feed, unanswered: Callable[[], int]) -> None:
        """A read: appended to what is held (reading stays paused), else taken from its start."""
        held = self.held
        if held is None:
            self.take(data, 0, feed, unanswered)
            return
        self.held = held[self.held_at :] + data
        self.held_at = 0
        self.flow.pause_reading()

    def take(self, data: bytes, start: int, feed: Feed, unanswered: Callable[[], int]) -> None:
        """Feed ``data`` from ``start`` as far as ``depth`` allows (``feed`` returns False once
        the rest is not the parser's: ending or upgraded); hold the rest, reading paused."""
        self.feeding = True
        try:
            end = len(data)
            while start < end:
                cut = parseable(data, start, self.tail, self.depth - unanswered())
                if cut == start:
                    self.held, self.held_at = data, start
                    self.flow.held = True
                    self.flow.pause_reading()
                    return
                self.tail = last_bytes(self.tail, data, start, cut)
                going = feed(data if start == 0 and cut == end else data[start:cut])
                start = cut
                if not going:
                    return
        finally:
            self.feeding = False

    def take_held(self, feed: Feed, unanswered: Callable[[], int]) -> bool:
        """Answers made room: feed what was held. True when nothing is held any more (the
        protocol then resumes reading, unless the connection is ending)."""
        data = self.held
        if data is None or self.feeding:
            return False
        self.drop()
        self.take(data, self.held_at, feed, unanswered)
        return self.held is None

    def drop(self) -> None:
        """What is held is discarded unparsed (the connection ends); reading may resume."""
        self.held = None
        self.flow.held = False

    def cut(self, current: Cycle | None) -> None:
        """The connection ends: every request of it still answered or queued is told so, the
        queued ones are dropped, what was held is discarded."""
        self.drop()
        queued = [cycle for cycle, _ in self.queue]
        for cycle in (self.answering, current, *queued):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        self.queue.clear()
        self.answering = None
