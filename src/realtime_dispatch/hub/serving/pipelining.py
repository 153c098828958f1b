"""How far a connection's requests are parsed ahead of their answers (:mod:`.http_protocol`):
:func:`parseable` and :class:`GatedFlow`.

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
too: that only makes a cut earlier than it had to be. Pure.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.flow_control import FlowControl

HEAD_END = b"\r\n\r\n"
TAIL = len(HEAD_END) - 1
"""Bytes kept of what was parsed last: a head end may straddle two reads."""


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
