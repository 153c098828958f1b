"""The clients of the capacity benchmark (``bench/hub/capacity.py``): many idle hub connections
and a few active ones in one process, each a distinct user, cheap enough to run beside the hub
they measure.

Run as ``python -m bench.hub._capacity_clients SPEC_FILE``; the spec (JSON) holds ``url`` (the hub's
WebSocket URL), ``secret`` (HS256), ``users`` (one user id per connection), ``addresses`` (the
loopback source address of each connection, by index), ``in_flight`` (connects at once),
``ping_every`` (seconds) and ``out`` (a file for the deliveries); and ``protocol``: ``hub``
(the default) or ``centrifuge`` (``bench/hub/go_centrifuge``'s, Centrifuge's JSON protocol: the
token in the connect command, then a subscribe command for each of the connection's
``channels``, by index, in one frame; its PING command as the keepalive; publications whose data
is the hub record, parsed the same way after the stop).

Commands on stdin (JSON lines) and events on stdout (JSON lines):

* at start the process mints every token, then prints ``ready``;
* ``{"cmd": "connect"}``: opens every connection, ``in_flight`` at a time (a connection counts
  once the hub answered its handshake), then prints ``connected`` with the wall time from the
  first connect to the last handshake answered, per-connection connect times and the failures;
* from then on ``progress`` twice a second (``message_received`` records so far, connections the
  hub closed);
* ``{"cmd": "stop"}``: closes every connection, parses what was received, writes
  ``[[client, message_id, latency_ms, sent_at], ...]`` to ``out`` and prints ``done``.

What each connection does: the token in the ``Authorization`` header, the JSON hub protocol
handshake, then a ping record every ``ping_every`` seconds (SignalR's keepalive is 15 s). The
pings are spread evenly: one shared timer ticks every 100 ms and pings the connections of that
tick's slot, so no two slots fire together and there is no timer per connection.

Cheap per connection and per delivery, as ``bench/e2e/_clients.py``: picows (callbacks, no task or
future per connection once it is open, a small read buffer), and while the run is on a message
is only kept (its bytes, arrival time and client, in flat lists) and its records counted; the
JSON is parsed after the stop. The hub's own pings are counted and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import uvloop
from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from realtime_dispatch.auth.tokens import mint_token
from support.hub_wire import HANDSHAKE, HANDSHAKE_ANSWER, PING, emit
from support.hub_wire import RS_BYTES as RS
from support.stats import percentiles

TEXT = WSMsgType.TEXT
TICK = 0.1  # seconds between two slots of pings
TARGET_MARK = b'"target":"message_received"'
READ_BUFFER = 4096  # picows grows it when a message needs more


class Received:
    """What the connections got after their handshakes, kept raw until the stop."""

    __slots__ = ("clients", "frames", "hub_pings", "times", "total")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.times: list[float] = []
        self.clients: list[int] = []
        self.total = 0  # message_received records among the frames
        self.hub_pings = 0

    def rows(self, centrifuge: bool) -> tuple[list[tuple[int, str, float, float]], Counter[str]]:
        """``(client, message id, latency ms, sent at)`` per ``message_received`` record
        (latency: the arrival time less the payload's ``sentAt``, a Unix time), and the other
        records by type (Centrifuge's command replies as ``reply``)."""
        sent_at: dict[str, float] = {}
        rows: list[tuple[int, str, float, float]] = []
        others: Counter[str] = Counter()
        for frame, now, client in zip(self.frames, self.times, self.clients, strict=True):
            for record in frame.split(b"\n" if centrifuge else RS):
                if not record:
                    continue
                message = orjson.loads(record)
                if centrifuge:  # a publication's data is the hub record; the rest are replies
                    if "id" in message or "channel" not in message.get("result", {}):
                        others["reply"] += 1
                        continue
                    message = message["result"]["data"]["data"]
                if message.get("type") != 1 or message.get("target") != "message_received":
                    others[str(message.get("type"))] += 1
                    continue
                payload = message["arguments"][0]
                message_id = payload["messageId"]
                sent = sent_at.get(message_id)
                if sent is None:
                    sent = sent_at[message_id] = datetime.fromisoformat(
                        payload["sentAt"]
                    ).timestamp()
                rows.append((client, message_id, (now - sent) * 1000, sent))
        return rows, others


class Client(WSListener):  # type: ignore[misc]
    """One connection: the handshake, then every message kept; pings come from :class:`Pinger`."""

    def __init__(self, index: int, shared: Shared) -> None:
        super().__init__()
        self.index = index
        self.shared = shared
        self.transport: WSTransport | None = None
        self.handshaken = False
        self.stopping = False
        self.answered_at = 0.0
        self.replies_due = 0  # centrifuge: the connect and subscribe replies still to come
        self.command_id = 0

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        if self.shared.centrifuge:
            self.replies_due = 1
            self.send_command(0, {"token": self.shared.tokens[self.index]})
        else:
            transport.send(TEXT, HANDSHAKE)

    def send_command(self, method: int, params: dict[str, str]) -> None:
        assert self.transport is not None
        self.command_id += 1
        self.transport.send(
            TEXT, orjson.dumps({"id": self.command_id, "method": method, "params": params})
        )

    def centrifuge_reply(self, payload: bytes) -> None:
        """Before the first push: the connect reply (then the subscribes, in one frame), the
        subscribe replies (then the connection counts)."""
        for reply in payload.split(b"\n"):
            if not reply:
                continue
            if b'"error"' in reply or b'"result"' not in reply:
                self.shared.fail(self, f"refused: {reply[:80]!r}")
                return
            self.replies_due -= 1
            if reply.startswith(b'{"id":1,'):
                channels = self.shared.spec["channels"][self.index]
                self.replies_due += len(channels)
                assert self.transport is not None
                self.transport.send(
                    TEXT,
                    b"\n".join(
                        orjson.dumps({"id": n, "method": 1, "params": {"channel": channel}})
                        for n, channel in enumerate(channels, start=2)
                    ),
                )
                self.command_id = 1 + len(channels)
        if self.replies_due == 0:
            self.handshaken = True
            self.answered_at = time.monotonic()
            self.shared.answered(self)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is TEXT and frame.fin:
            payload = frame.get_payload_as_bytes()
            if self.handshaken:  # the hot path
                if payload == PING:
                    self.shared.received.hub_pings += 1
                    return
                received = self.shared.received
                received.times.append(time.time())
                received.frames.append(payload)
                received.clients.append(self.index)
                received.total += payload.count(TARGET_MARK)
            elif self.shared.centrifuge:
                self.centrifuge_reply(payload)
            elif payload == HANDSHAKE_ANSWER:
                self.handshaken = True
                self.answered_at = time.monotonic()
                self.shared.answered(self)
            else:
                self.shared.fail(self, f"handshake refused: {payload[:80]!r}")
        elif kind is WSMsgType.CLOSE:
            code = frame.get_close_code()
            transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO else code)
            transport.disconnect()
        else:  # nothing else is expected from the hub: noted, not kept
            self.shared.unexpected[kind.name] += 1

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.stopping:
            self.shared.fail(self, "the hub closed the connection")

    def ping(self) -> None:
        transport = self.transport
        if transport is not None and self.handshaken and not transport.is_close_frame_sent:
            if self.shared.centrifuge:
                self.send_command(7, {})  # its PING; the reply is kept as a reply
            else:
                transport.send(TEXT, PING)

    def stop(self) -> None:
        self.stopping = True
        if self.transport is not None:
            self.transport.send_close(WSCloseCode.OK)
            self.transport.disconnect()


class Shared:
    def __init__(self, spec: dict[str, Any], tokens: list[str]) -> None:
        self.spec = spec
        self.tokens = tokens
        self.centrifuge = spec.get("protocol", "hub") == "centrifuge"
        self.received = Received()
        self.unexpected: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.closed_by_hub = 0
        self.open: list[Client] = []
        self.waiting: dict[int, asyncio.Future[bool]] = {}

    def answered(self, client: Client) -> None:
        waiter = self.waiting.pop(client.index, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def fail(self, client: Client, error: str) -> None:
        waiter = self.waiting.pop(client.index, None)
        if waiter is not None and not waiter.done():
            self.failures[error] += 1
            waiter.set_result(False)
        elif client.handshaken:
            self.closed_by_hub += 1
        if client.transport is not None:
            client.transport.disconnect()


class Pinger:
    """One timer for every connection's keepalive: slot ``k`` of ``ping_every / TICK`` pings the
    connections whose index falls in it, so each connection pings once per ``ping_every``. It
    runs from the first connect on: a connect phase may last longer than the hub's idle timeout
    (30 s), and a connection that sends nothing for that long is closed."""

    def __init__(self, ping_every: float) -> None:
        self.slots: list[list[Client]] = [[] for _ in range(max(1, round(ping_every / TICK)))]
        self.slot = 0
        self.sent = 0
        self.loop = asyncio.get_running_loop()
        self.next_at = self.loop.time()
        self.handle: asyncio.TimerHandle | None = None

    def add(self, client: Client) -> None:
        """Ping ``client`` from now on (its handshake is done)."""
        self.slots[client.index % len(self.slots)].append(client)

    def start(self) -> None:
        self.next_at = self.loop.time() + TICK
        self.handle = self.loop.call_at(self.next_at, self.tick)

    def tick(self) -> None:
        for client in self.slots[self.slot]:
            client.ping()
        self.sent += len(self.slots[self.slot])
        self.slot = (self.slot + 1) % len(self.slots)
        self.next_at += TICK  # no drift: the next tick is due a TICK after this one was
        self.handle = self.loop.call_at(self.next_at, self.tick)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


async def connect_all(shared: Shared, tokens: list[str], pinger: Pinger) -> dict[str, Any]:
    """Open every connection, ``in_flight`` at a time; the figures of the connect phase."""
    spec = shared.spec
    url, addresses = spec["url"], spec["addresses"]
    loop = asyncio.get_running_loop()
    indices = iter(range(len(tokens)))
    durations: list[float] = []

    async def one(index: int) -> None:
        client = Client(index, shared)
        waiter: asyncio.Future[bool] = loop.create_future()
        shared.waiting[index] = waiter
        started = time.monotonic()
        try:
            await ws_connect(
                lambda: client,
                url,
                extra_headers={"Authorization": f"Bearer {tokens[index]}"},
                websocket_handshake_timeout=60,
                read_buffer_init_size=READ_BUFFER,
                local_addr=(addresses[index], 0),
            )
            ok = await asyncio.wait_for(waiter, 60)
        except Exception as error:  # refused upgrades, resets, timeouts: counted by kind
            shared.waiting.pop(index, None)
            shared.failures[f"{type(error).__name__}: {str(error)[:80]}"] += 1
            if client.transport is not None:
                client.transport.disconnect()
            return
        if ok:
            durations.append(client.answered_at - started)
            shared.open.append(client)
            pinger.add(client)

    async def worker() -> None:
        for index in indices:
            await one(index)

    first = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(spec["in_flight"])))
    last = max((c.answered_at for c in shared.open), default=first)
    return {
        "event": "connected",
        "clients": len(shared.open),
        "failures": sum(shared.failures.values()),
        "errors": dict(shared.failures.most_common(5)),
        "wall_s": last - first,
        "connect_ms": {k: round(v * 1000, 1) for k, v in percentiles(durations).items()},
    }


async def main(spec: dict[str, Any]) -> None:
    tokens = [mint_token(spec["secret"], UUID(user), ttl=7200) for user in spec["users"]]
    shared = Shared(spec, tokens)
    emit({"event": "ready", "clients": len(tokens)})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pinger = Pinger(spec["ping_every"])
    reporter: asyncio.Task[None] | None = None

    async def progress() -> None:
        while True:
            await asyncio.sleep(0.5)
            emit(
                {
                    "event": "progress",
                    "total": shared.received.total,
                    "closed_by_hub": shared.closed_by_hub,
                }
            )

    while line := await reader.readline():
        command = json.loads(line)["cmd"]
        if command == "connect":
            pinger.start()
            emit(await connect_all(shared, tokens, pinger))
            reporter = asyncio.create_task(progress())
        elif command == "stop":
            break
    if reporter is not None:
        reporter.cancel()
    pinger.stop()
    for client in shared.open:
        client.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(
            asyncio.gather(
                *(c.transport.wait_disconnected() for c in shared.open if c.transport is not None)
            ),
            20,
        )
    rows, others = shared.received.rows(shared.centrifuge)
    await asyncio.to_thread(Path(spec["out"]).write_bytes, orjson.dumps(rows))
    emit(
        {
            "event": "done",
            "deliveries": len(rows),
            "other_records": dict(others),
            "hub_pings": shared.received.hub_pings,
            "client_pings": pinger.sent,
            "closed_by_hub": shared.closed_by_hub,
            "unexpected_frames": dict(shared.unexpected),
        }
    )


if __name__ == "__main__":
    uvloop.run(main(json.loads(Path(sys.argv[1]).read_text())))
