"""A process of real hub clients for the end-to-end benchmark: WebSocket connections speaking
the JSON hub protocol (token in the ``Authorization`` header, no negotiate), each noting
``time.time()`` for every ``message_received`` invocation it gets.

Run as ``python -m bench.e2e._clients SPEC_FILE``; the spec (JSON) holds ``clients`` (a list of
``[ws_url, token]``) and ``out`` (a file for the deliveries). The process prints JSON lines on
stdout: ``{"event": "connected"}`` once every client has finished its handshake, then
``{"event": "progress", "total": n}`` twice a second. A line on stdin (or its end) stops it; it
then writes ``[[message_id, receive_time], ...]`` (one entry per delivery) to ``out`` and prints
``{"event": "done", "total": n}``.

The load generator shares the machine with the server it measures, so it is built to cost
little per delivery:

- picows (an RFC 6455 client in Cython: the upgrade handshake with its ``Sec-WebSocket-Accept``
  check, masked client frames, automatic pongs) drives every connection through callbacks, with
  no task or future per connection or per message;
- while the run is on, a message is only kept (its bytes and arrival time, in two flat lists the
  garbage collector does not walk) and its ``message_received`` records counted for progress; the
  records are parsed (JSON, in full) after the stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop
from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from support.hub_wire import HANDSHAKE, HANDSHAKE_ANSWER, PING, emit
from support.hub_wire import RS_BYTES as RS

PING_EVERY = 10.0  # the hub protocol's keepalive interval, seconds
INVOCATION = 1
TARGET = "message_received"
# For the progress count only: a quote inside a JSON string is escaped, so these bytes are the
# target of an invocation record, never part of a message's text.
TARGET_MARK = b'"target":"message_received"'
TEXT = WSMsgType.TEXT


class Deliveries:
    """Every message the clients got after their handshake, with its arrival time."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.times: list[float] = []
        self.total = 0  # message_received records among them

    def rows(self) -> list[tuple[str, float]]:
        """(message id, receive time) of every ``message_received``, in arrival order."""
        rows = []
        for frame, now in zip(self.frames, self.times, strict=True):
            for record in frame.split(RS):
                if not record:
                    continue
                message = orjson.loads(record)
                if message.get("type") == INVOCATION and message.get("target") == TARGET:
                    rows.append((message["arguments"][0]["messageId"], now))
        return rows


class HubClient(WSListener):  # type: ignore[misc]
    """One connection: sends the hub handshake, checks its answer, then keeps every message and
    sends a ping record every 10 s."""

    def __init__(self, deliveries: Deliveries, failures: list[str]) -> None:
        super().__init__()
        self.deliveries = deliveries
        self.failures = failures
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = self.loop.create_future()
        self.transport: WSTransport | None = None
        self.handshaken = False
        self.stopping = False
        self.fragments: list[bytes] | None = None  # a fragmented message being put together
        self.keepalive: asyncio.TimerHandle | None = None

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        transport.send(TEXT, HANDSHAKE)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is TEXT and frame.fin and self.handshaken:  # the hot path: a whole message
            payload = frame.get_payload_as_bytes()
            deliveries = self.deliveries
            deliveries.times.append(time.time())
            deliveries.frames.append(payload)
            deliveries.total += payload.count(TARGET_MARK)
        elif kind is TEXT or kind is WSMsgType.BINARY:
            if frame.fin:
                self.message(frame.get_payload_as_bytes())
            else:
                self.fragments = [frame.get_payload_as_bytes()]
        elif kind is WSMsgType.CONTINUATION and self.fragments is not None:
            self.fragments.append(frame.get_payload_as_bytes())
            if frame.fin:
                payload, self.fragments = b"".join(self.fragments), None
                self.message(payload)
        elif kind is WSMsgType.CLOSE:
            code = frame.get_close_code()
            transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO else code)
            transport.disconnect()

    def message(self, payload: bytes) -> None:
        """A whole message off the hot path: the handshake answer, or a fragmented message."""
        if self.handshaken:
            self.deliveries.times.append(time.time())
            self.deliveries.frames.append(payload)
            self.deliveries.total += payload.count(TARGET_MARK)
        elif payload == HANDSHAKE_ANSWER:
            self.handshaken = True
            self.ready.set_result(None)
            self.keepalive = self.loop.call_later(PING_EVERY, self.ping)
        else:
            self.fail(f"handshake refused: {payload!r}")

    def ping(self) -> None:
        if self.transport is not None and not self.transport.is_close_frame_sent:
            self.transport.send(TEXT, PING)
            self.keepalive = self.loop.call_later(PING_EVERY, self.ping)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self.keepalive is not None:
            self.keepalive.cancel()
        if not self.stopping:
            self.fail("the server closed the connection")

    def fail(self, error: str) -> None:
        self.failures.append(error)
        if not self.ready.done():
            self.ready.set_result(None)
        if self.transport is not None:
            self.transport.disconnect()

    def stop(self) -> None:
        self.stopping = True
        if self.keepalive is not None:
            self.keepalive.cancel()
        if self.transport is not None:
            self.transport.send_close(WSCloseCode.OK)
            self.transport.disconnect()


async def client(url: str, token: str, deliveries: Deliveries, failures: list[str]) -> HubClient:
    _, listener = await ws_connect(
        lambda: HubClient(deliveries, failures),
        url,
        extra_headers={"Authorization": f"Bearer {token}"},
        websocket_handshake_timeout=60,
        max_frame_size=1 << 30,
    )
    assert isinstance(listener, HubClient)
    await asyncio.wait_for(asyncio.shield(listener.ready), 60)
    return listener


async def main(spec: dict[str, Any]) -> tuple[Deliveries, list[str]]:
    deliveries = Deliveries()
    failures: list[str] = []
    clients: list[HubClient] = []
    gate = asyncio.Semaphore(50)  # handshakes in flight

    async def start(url: str, token: str) -> None:
        async with gate:
            try:
                clients.append(await client(url, token, deliveries, failures))
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}")

    await asyncio.gather(*(start(url, token) for url, token in spec["clients"]))
    if failures:
        emit({"event": "failed", "errors": failures[:5]})
        raise SystemExit(1)
    emit({"event": "connected", "clients": len(clients)})

    async def progress() -> None:
        while True:
            await asyncio.sleep(0.5)
            emit({"event": "progress", "total": deliveries.total, "at": time.time()})

    reporter = asyncio.create_task(progress())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.readline()
    reporter.cancel()
    for hub in clients:
        hub.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(
            asyncio.gather(
                *(hub.transport.wait_disconnected() for hub in clients if hub.transport)
            ),
            10,
        )
    return deliveries, failures


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    got, errors = uvloop.run(main(spec))
    rows = got.rows()
    Path(spec["out"]).write_bytes(orjson.dumps(rows))
    emit({"event": "done", "total": len(rows), "failures": errors[:5]})
