"""The clients of the reconnect storm (``bench/e2e/storm.py``): many users in one process, each
speaking what the SDKs speak, cheaply.

Run as ``python -m bench.e2e._storm_clients SPEC_FILE``; the spec (JSON) holds ``ws`` (the hub's
WebSocket URL), ``rest`` (the REST base URL), ``clients`` (``[user_id, token]`` each) and
``out`` (a file for the results), and ``addresses`` (the loopback source address of each client,
by index: the hub caps connections per address). Each client:

* holds one WebSocket (JSON hub protocol, token in the ``Authorization`` header, a ping every
  10 s; picows, no task per connection) and takes a sync cursor (``GET /api/sync``) once its
  first handshake is done;
* applies every ``message_received`` through the SDK's dedupe: by ``eventId``, then by
  ``(chatId, seq)``; a message that passes both is *shown* (counted per message id);
* when its socket drops, reconnects with full-jitter backoff (0.25 s doubling to 5 s, the SDK's
  defaults) and, once the handshake is done, catches up the way the current mode says:
  ``sync`` (pages of ``GET /api/sync`` from its cursor; the SDK's resume) or ``full`` (today's
  resync: ``GET /api/chats`` and each chat's messages after the last contiguous seq minus 20).
  The moment that catch-up ends is when the client is live again; each catch-up records when
  the attempt that got through began (after its backoff wait), the attempts since the drop,
  the handshake done and the client live.

Commands on stdin (JSON lines): ``{"cmd": "mode", "mode": "sync" | "full"}``, ``{"cmd":
"mark"}`` (start a new storm: forget the last live times), ``{"cmd": "stop"}`` (write the
results and exit). Events on stdout: ``connected``, then ``live`` (how many clients are live
since the last mark) twice a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from support.hub_wire import HANDSHAKE, PING, emit
from support.hub_wire import RS_BYTES as RS

TEXT = WSMsgType.TEXT
SYNC_LIMIT = 500
HANDSHAKE_TIMEOUT = 15.0
OVERLAP = 20
POOL = 256  # REST connections per client process


class Shared:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.ws = spec["ws"]
        self.rest = spec["rest"]
        # aiohttp, not httpx: httpx's pool looks at every connection of the pool (a readability
        # check each) for every request it assigns, and with 256 connections that was 79% of
        # a client process's samples in a storm (py-spy, 2026-12-03).
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL),
            timeout=aiohttp.ClientTimeout(total=120),
        )
        # At most a pool's worth of requests under way at once: a connection opened for a
        # request that then waits behind thousands sends it too late for the server's header
        # timeout (408s, a stalled storm).
        self.requests = asyncio.Semaphore(POOL)
        self.mode = "sync"
        self.statuses: Counter[int] = Counter()  # REST answers by status
        self.errors: Counter[str] = Counter()  # transport errors by class
        self.hub_refusals: Counter[str] = Counter()
        self.marked_at = 0.0
        self.latency: dict[str, list[tuple[float, float]]] = {}  # REST (ended at, seconds)
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def aclose(self) -> None:
        await self.http.close()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class Client(WSListener):  # type: ignore[misc]
    def __init__(self, shared: Shared, user: str, token: str, address: str) -> None:
        super().__init__()
        self.shared = shared
        self.user = user
        self.address = address
        self.auth = {"Authorization": f"Bearer {token}"}
        self.token = token
        self.loop = asyncio.get_running_loop()
        self.transport: WSTransport | None = None
        self.handshaken = False
        self.keepalive: asyncio.TimerHandle | None = None
        self.cursor: str | None = None
        self.seen: set[str] = set()
        self.seqs: dict[str, set[int]] = {}
        self.shown: Counter[str] = Counter()
        self.dropped = 0
        self.live_at: float | None = None
        self.down_at: float | None = None
        self.catchups: list[dict[str, Any]] = []
        self.first = asyncio.Event()
        self.failures = 0
        self.attempt_at = 0.0  # when the last connect attempt began (after its backoff wait)
        self.attempts = 0  # connect attempts since the socket dropped
        self.retrying = False  # a reconnect loop is running (not live and not retrying: stuck)
        self.stopping = False

    # --- the socket ---------------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        if self.transport is not None:  # a late attempt that was given up: not this one
            transport.disconnect()
            return
        self.transport = transport
        transport.send(TEXT, HANDSHAKE)
        # As SignalR clients do: a handshake that is never answered ends the attempt, so that
        # a connection the server accepted and then forgot cannot hold a client forever.
        self.keepalive = self.loop.call_later(HANDSHAKE_TIMEOUT, self.handshake_late)

    def handshake_late(self) -> None:
        if self.transport is not None and not self.handshaken:
            self.shared.hub_refusals["HandshakeTimeout"] += 1
            self.transport.disconnect()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is TEXT:
            for record in frame.get_payload_as_bytes().split(RS):
                if record:
                    self.record(record)
        elif frame.msg_type is WSMsgType.CLOSE:
            transport.send_close(WSCloseCode.OK)
            transport.disconnect()

    def record(self, record: bytes) -> None:
        if not self.handshaken:
            if record == b"{}":
                self.handshaken = True
                self.failures = 0
                if self.keepalive is not None:
                    self.keepalive.cancel()
                self.keepalive = self.loop.call_later(10, self.ping)
                self.shared.spawn(self.catch_up())
            return
        message = orjson.loads(record)
        if message.get("type") == 1 and message.get("target") == "message_received":
            self.apply(message["arguments"][0])

    def ping(self) -> None:
        if self.transport is not None and not self.transport.is_close_frame_sent:
            self.transport.send(TEXT, PING)
            self.keepalive = self.loop.call_later(10, self.ping)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if transport is not self.transport:
            return
        if self.keepalive is not None:
            self.keepalive.cancel()
        self.handshaken = False
        self.transport = None
        if not self.stopping:
            self.down_at = time.time()
            self.live_at = None
            self.shared.spawn(self.reconnect())

    async def connect(self) -> bool:
        # An attempt that hangs (a SYN dropped by a full accept queue waits out the kernel's
        # retransmits) is abandoned after 15 s, without waiting for its cancellation.
        attempt = asyncio.ensure_future(
            ws_connect(
                lambda: self,
                self.shared.ws,
                extra_headers=self.auth,
                websocket_handshake_timeout=10,
                local_addr=(self.address, 0),
            )
        )
        done, _ = await asyncio.wait({attempt}, timeout=15)
        if not done:
            attempt.cancel()
            self.shared.hub_refusals["AttemptTimeout"] += 1
            return False
        error = attempt.exception()
        if error is not None:  # refused while the replica is down, 503 while it starts
            self.shared.hub_refusals[type(error).__name__] += 1
            return False
        _, listener = attempt.result()
        if listener is None:
            # The socket closed before the upgrade answer (a replica killed or restarting with
            # the request in its backlog): picows returns without an error and never calls
            # on_ws_connected nor on_ws_disconnected, so taken for a success this attempt
            # would leave the client down for good.
            self.shared.hub_refusals["ClosedBeforeUpgrade"] += 1
            return False
        return True

    async def reconnect(self) -> None:
        self.retrying = True
        self.attempts = 0
        try:
            while not self.stopping:
                self.failures += 1
                bound = min(5.0, 0.25 * 2 ** (self.failures - 1))
                await asyncio.sleep(random.random() * bound)  # full jitter
                self.attempt_at = time.time()
                self.attempts += 1
                if await self.connect():
                    return
        finally:
            self.retrying = False

    # --- events ---------------------------------------------------------------------------------

    def apply(self, payload: dict[str, Any]) -> None:
        event_id = payload.get("eventId")
        if event_id is not None:
            if event_id in self.seen:
                self.dropped += 1
                return
            self.seen.add(event_id)
        self.apply_message(payload["chatId"], payload["seq"], payload["messageId"])

    def apply_message(self, chat: str, seq: int, message_id: str) -> None:
        seqs = self.seqs.setdefault(chat, set())
        if seq in seqs:
            self.dropped += 1
            return
        seqs.add(seq)
        self.shown[message_id] += 1

    def contiguous(self, chat: str) -> int:
        seqs = self.seqs.get(chat, set())
        n = 0
        while n + 1 in seqs:
            n += 1
        return n

    # --- catching up ------------------------------------------------------------------------------

    async def get(self, path: str, params: dict[str, Any]) -> Any:
        shared = self.shared
        for attempt in range(1, 1000):
            try:
                async with shared.requests:
                    started = time.perf_counter()
                    async with shared.http.get(
                        shared.rest + path, params=params, headers=self.auth
                    ) as response:
                        status, body = response.status, await response.read()
                        retry_after = response.headers.get("Retry-After")
                key = (
                    "sync"
                    if path == "/api/sync"
                    else "chats"
                    if path == "/api/chats"
                    else "history"
                )
                seconds = time.perf_counter() - started
                shared.latency.setdefault(key, []).append((time.time(), seconds))
            except (aiohttp.ClientError, TimeoutError) as error:
                shared.errors[type(error).__name__] += 1
                await asyncio.sleep(random.random() * min(5.0, 0.25 * 2**attempt))
                continue
            shared.statuses[status] += 1
            if status == 200:
                return orjson.loads(body)
            retry = float(retry_after or 0)
            await asyncio.sleep(max(retry * (1 + random.random()), random.random() * 0.5))
        raise RuntimeError("REST kept failing")

    async def catch_up(self) -> None:
        try:
            await self.caught_up()
        except Exception as error:  # counted, so that a stuck client shows why
            self.shared.errors[f"catch_up {type(error).__name__}: {error}"[:120]] += 1

    async def caught_up(self) -> None:
        started = time.time()
        requests = 0
        if self.cursor is None:
            self.cursor = (await self.get("/api/sync", {"limit": SYNC_LIMIT}))["nextCursor"]
            requests = 1
        elif self.shared.mode == "sync":
            while True:
                page = await self.get("/api/sync", {"since": self.cursor, "limit": SYNC_LIMIT})
                requests += 1
                for event in page["events"]:
                    if event["target"] == "message_received":
                        self.apply(event["payload"])
                self.cursor = page["nextCursor"]
                if page.get("heldBack"):
                    await asyncio.sleep(0.1)
                elif len(page["events"]) < SYNC_LIMIT:
                    break
        else:
            listed = await self.get("/api/chats", {"limit": 200})
            requests += 1
            for chat in listed["items"]:
                after = max(0, self.contiguous(chat["chatId"]) - OVERLAP)
                while True:
                    items = (
                        await self.get(
                            f"/api/chats/{chat['chatId']}/messages",
                            {"afterSeq": after, "limit": 200},
                        )
                    )["items"]
                    requests += 1
                    for item in items:
                        self.apply_message(chat["chatId"], item["seq"], item["messageId"])
                    if len(items) < 200:
                        break
                    after = items[-1]["seq"]
        self.live_at = time.time()
        if self.down_at is not None:
            self.catchups.append(
                {
                    "mode": self.shared.mode,
                    "down_at": self.down_at,
                    "attempt_at": self.attempt_at,
                    "attempts": self.attempts,
                    "connected_at": started,
                    "live_at": self.live_at,
                    "requests": requests,
                }
            )
        self.first.set()

    def stop(self) -> None:
        self.stopping = True
        if self.keepalive is not None:
            self.keepalive.cancel()
        if self.transport is not None:
            self.transport.send_close(WSCloseCode.OK)
            self.transport.disconnect()


async def main(spec: dict[str, Any]) -> None:
    shared = Shared(spec)
    clients = [
        Client(shared, user, token, address)
        for (user, token), address in zip(spec["clients"], spec["addresses"], strict=True)
    ]
    gate = asyncio.Semaphore(100)

    async def first(client: Client) -> None:
        async with gate:
            while not await client.connect():  # noqa: ASYNC110 - the hub is still starting
                await asyncio.sleep(0.5)
            await client.first.wait()

    await asyncio.gather(*(first(c) for c in clients))
    emit({"event": "connected", "clients": len(clients)})

    async def progress() -> None:
        while True:
            await asyncio.sleep(0.5)
            live = sum(
                1 for c in clients if c.live_at is not None and c.live_at >= shared.marked_at
            )
            emit({"event": "live", "live": live, "at": time.time()})

    reporter = asyncio.create_task(progress())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        if command["cmd"] == "mode":
            shared.mode = command["mode"]
        elif command["cmd"] == "mark":
            shared.marked_at = time.time()
        elif command["cmd"] == "stop":
            break
    reporter.cancel()
    # Taken before stop, which ends every socket and task: the state each client was stuck in.
    not_live = Counter(
        f"handshaken={c.handshaken} transport={c.transport is not None} "
        f"retrying={c.retrying} failures={c.failures}"
        for c in clients
        if c.live_at is None or c.live_at < shared.marked_at
    )
    for c in clients:
        c.stop()
    # Catch-ups and reconnects still under way end here, so that stop works mid-catch-up.
    for task in list(shared.tasks):
        task.cancel()
    await asyncio.gather(*shared.tasks, return_exceptions=True)
    await shared.aclose()
    results = {
        "clients": [
            {
                "user": c.user,
                "shown": dict(c.shown),
                "dropped": c.dropped,
                "catchups": c.catchups,
            }
            for c in clients
        ],
        "rest_statuses": {str(k): v for k, v in shared.statuses.items()},
        "not_live": not_live,
        "rest_errors": dict(shared.errors),
        "hub_refusals": dict(shared.hub_refusals),
        "rest_latency": {key: [list(sample) for sample in v] for key, v in shared.latency.items()},
    }
    await asyncio.to_thread(Path(spec["out"]).write_bytes, orjson.dumps(results))
    emit({"event": "done"})


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(main(spec))
