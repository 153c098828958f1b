"""The hub against peers, same clients, same pushes, same machine, one command:

    python -m bench.hub.peers [--clients 1000] [--layouts 100,10] [--pushes 2000] [--runs 3]
    python -m bench.hub.peers fanout [--members 100] [--mix json|messagepack|mixed] [--pushes N]

Servers, each in its own process, each measured with the clients process of
``bench/hub/fanout.py`` (``--clients`` WebSocket connections sending the hub handshake; the first
``--members`` of them are the chat's members and connect with ``?member=1``):

* ``hub``: the real hub (the same app, WebSocket route, JWT auth, JSON hub protocol and
  membership from PostgreSQL as ``realtime-dispatch serve``, on uvloop as the CLI runs it);
  pushes arrive on stdin like the peers' and go the way the dispatcher's go in ``serve``:
  ``--batch`` (8) per ``publish`` call to the in-process publisher, which passes the membership
  barrier (one PostgreSQL round trip per call) and hands them to the hub's fan-out;
* ``hub-marked``: the same hub process as ``hub``, its batches carrying membership marks as the
  dispatcher's do in ``serve`` (a :class:`~realtime_dispatch.dispatch.marks.MarkKeeper` on a
  connection of its own, listening on ``realtime_membership``, as the runner's): the hub has
  heard them, so it passes the barrier without its round trip; the keeper's marks (one every
  few seconds) are paid in the hub process too;
* ``hub-msgpack`` and ``hub-mixed``: the same hub process as ``hub``, its clients speaking the
  MessagePack hub protocol (binary frames), all of them or every other one: the fan-out cost
  per frame of MessagePack next to JSON, a push re-encoded once for all MessagePack members;
* ``hub-http``: the real hub under ``run_hub``, pushed to from this process over HTTP by the
  worker's publisher, ``--batch`` pushes per request (as many as the in-process ``hub`` gets
  per ``publish`` call; 1 = the one-push form, each push its own ``POST``),
  ``--http-concurrency`` requests in flight: the cost of a push from another process, HTTP
  request and barrier included;
* ``hub-http-marked``: ``hub-http`` with this process's publisher handing on membership marks in
  the batch's body, as ``realtime-dispatch worker`` does with ``REALTIME_HUB_URL`` (a
  :class:`~realtime_dispatch.dispatch.marks.MarkKeeper` here, on a connection of its own): the
  hub that heard them passes its barrier without the round trip; the hub's
  ``membership_barriers_total`` by kind is reported, so a run that did not skip it shows;
* ``floor``: a minimal server in this file (uvloop): it answers the WebSocket upgrade and the
  hub handshake, then writes pre-framed records to every member's transport; no protocol, no
  auth;
* ``floor-batched``: the floor writing the 8 frames of an event-loop turn, joined once, in one
  ``write`` per member (as the hub coalesces the records due to one connection in a batch);
* ``floor-http``: ``floor-batched`` whose pushes come over HTTP, from this process's worker
  publisher as ``hub-http``'s do: it reads each batch request with httptools, decodes its body,
  frames each push's record from its target and arguments, writes the request's frames joined in
  one ``write`` per member and answers every push accepted (no auth, no checks, no barrier):
  the floor of a push from another process, against which ``hub-http`` and ``hub-http-marked``
  are measured (``*_vs_floor-http``);
* ``ws``: ``bench/hub/ws_broadcast.mjs``, a Node.js ``ws`` broadcast server writing the same record
  bytes;
* ``go-ws`` and ``go-ws-joined``: ``bench/hub/go_ws/main.go``, a gorilla/websocket broadcast server
  in Go (one writer goroutine per connection fed by a channel) writing the same record bytes,
  each record a frame of its own, or (``-joined``) a batch's 8 records in one frame: the floor
  and the batched floor of a compiled server;
* ``centrifuge``: ``bench/hub/go_centrifuge/main.go``, a node of the Centrifuge library (Go, memory
  broker, its JSON protocol), the library Centrifugo is built on: the clients connect and the
  members subscribe to one channel; each push is a ``node.Publish`` whose data is the same
  record (its writer joins the publications due to a connection in one frame). The clients
  process speaks its protocol (connect, subscribe, its ping command every 10 s) and counts its
  publications the way the others count hub records;
* ``socketio``: python-socketio (``AsyncServer`` under uvicorn on uvloop): members enter a
  room on connect and every push is ``emit`` to that room. Its clients are the same clients
  process speaking engine.io v4 / socket.io v5 framing over the same WebSocket client library
  (open packet, namespace connect, pong to the server's pings) and counting event packets the
  way the others count hub records.

Every server but ``hub-http`` takes a stdin line ``{"pushes": n}`` and sends n records, 8
pushes per event-loop turn (``--batch`` per ``publish`` call for ``hub``; the Go servers yield
to their other goroutines after every 8); the records carry the same chat id, so they are the
same size. The Go servers are built from Debian's packages (``golang-go`` and the
``golang-github-*-dev`` packages of gorilla/websocket, Centrifuge and its dependencies, in
GOPATH mode, nothing fetched) into ``build/bench-go/`` before the first run, again when their
source changes (``make bench-peers``, or ``python -m bench.hub.peers build``).

For each server and layout (members per push): delivered frames/s and the server's CPU µs per
delivered frame (each of its threads' schedstat nanoseconds, as for every server), as the median
of ``--runs`` runs with their range; the server's CPU while every client is connected and
nothing is pushed (``idle_cpu_percent``, over 2 s, and the per-frame figure less it); and the
server's RSS per connection (after connecting, before any push). With both ``hub`` and
``hub-http`` it also prints ``hub-http_vs_hub``, and ``hub-http-marked_vs_hub-marked`` likewise.
After the runs every member must have received every push exactly once, and nobody else any.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import module_command, null_connection, parse_with_smoke
from bench.hub.fanout import (
    SECRET,
    SERVICE_KEY,
    check_received,
    drop_database,
    fanout_run,
    http_limits_off,
    prepare_database,
    stop_clients,
    wait_http,
)
from support.hub_wire import RS_BYTES as RS
from support.procs import cpu_seconds, cpu_seconds_ns, free_port, rss_kib

HERE = Path(__file__).resolve().parent
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# --- the floor: pre-framed records straight to transports --------------------------------------


def frame(payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    return bytes((0x81, 126)) + size.to_bytes(2, "big") + payload


class FloorProtocol(asyncio.Protocol):
    def __init__(self, members: list[asyncio.Transport]) -> None:
        self.members = members
        self.transport: asyncio.Transport | None = None
        self.state = "http"
        self.buffer = b""
        self.member = False
        self.posts: FloorPosts | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.posts is not None:
            self.posts.parser.feed_data(data)
            return
        if self.state == "http":
            self.buffer += data
            if b"\r\n\r\n" not in self.buffer:
                return
            if self.buffer.startswith(b"POST "):  # floor-http: the worker's batches
                self.posts = FloorPosts(self.transport, self.members)
                self.posts.parser.feed_data(self.buffer)
                return
            head = self.buffer.decode("latin-1")
            self.member = "member=1" in head.split("\r\n", 1)[0]
            key = next(
                line.split(":", 1)[1].strip()
                for line in head.split("\r\n")
                if line.lower().startswith("sec-websocket-key:")
            )
            accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
            self.transport.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept.encode() + b"\r\n\r\n"
            )
            self.state = "handshake"
        elif self.state == "handshake":  # the client's hub handshake: answer, then it is a member
            self.transport.write(frame(b"{}" + RS))
            self.state = "open"
            if self.member:
                self.members.append(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport in self.members:
            self.members.remove(self.transport)


class FloorPosts:
    """``floor-http``'s side of a connection that posts batches: each one's records framed and
    written, joined, to every member, and every push answered accepted."""

    def __init__(self, transport: asyncio.Transport, members: list[asyncio.Transport]) -> None:
        import httptools
        import orjson

        self.loads, self.dumps = orjson.loads, orjson.dumps  # imported once, not per batch
        self.transport = transport
        self.members = members
        self.body: list[bytes] = []
        self.parser = httptools.HttpRequestParser(self)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        dumps = self.dumps
        pushes = self.loads(b"".join(self.body))["pushes"]
        self.body = []
        data = b"".join(
            frame(dumps({"type": 1, "target": p["target"], "arguments": p["arguments"]}) + RS)
            for p in pushes
        )
        for transport in self.members:
            transport.write(data)
        answer = dumps({"results": [{"status": 202}] * len(pushes)})
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % len(answer)
            + answer
        )


async def stdin_lines() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def floor_main(args: argparse.Namespace) -> None:
    import orjson

    loop = asyncio.get_running_loop()
    members: list[asyncio.Transport] = []
    server = await loop.create_server(lambda: FloorProtocol(members), "127.0.0.1", args.port)
    print(json.dumps({"event": "listening"}), flush=True)
    reader = await stdin_lines()
    chat = args.chat
    batched = args.mode == "floor-batched"
    while line := await reader.readline():
        pushes = json.loads(line)["pushes"]
        for start in range(0, pushes, 8):
            frames = []
            for n in range(start, min(start + 8, pushes)):
                record = orjson.dumps(
                    {
                        "type": 1,
                        "target": "message_received",
                        "arguments": [{"chatId": chat, "seq": n}],
                    }
                )
                data = frame(record + RS)
                if batched:
                    frames.append(data)
                    continue
                for transport in members:
                    transport.write(data)
            if batched:  # the turn's frames, joined once, in one write per member
                data = b"".join(frames)
                for transport in members:
                    transport.write(data)
            await asyncio.sleep(0)
    server.close()


async def started(server: Any, serving: asyncio.Task[None]) -> None:
    """Wait until a uvicorn server listens (or raise what stopped it)."""
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)


# --- the hub, pushes in-process as in `serve` ---------------------------------------------------


async def hub_main(args: argparse.Namespace) -> None:
    from starlette.applications import Starlette

    from realtime_dispatch.delivery.push import Push
    from realtime_dispatch.hub import Hub, HubOptions, hub_routes
    from realtime_dispatch.hub.serving.server import HubServer, uvicorn_config
    from realtime_dispatch.telemetry.logs import configure_logging

    configure_logging("warning")
    options = HubOptions(jwt_secret=SECRET, service_key=SERVICE_KEY)
    async with Hub(options, pool=None, dsn=args.dsn) as hub:
        app = Starlette(routes=hub_routes(hub))
        config = uvicorn_config(
            app,
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            hub=hub,
            **http_limits_off(),
        )
        server = HubServer(config, hub, install_signal_handlers=False)
        serving = asyncio.create_task(server.serve())
        await started(server, serving)
        await hub.wait_ready()
        print(json.dumps({"event": "listening"}), flush=True)
        publisher = hub.publisher()
        group, chat = f"chat:{args.chat}", args.chat
        marking = await marked(hub, args.dsn) if args.marks else None
        reader = await stdin_lines()
        while line := await reader.readline():
            pushes = json.loads(line)["pushes"]
            for start in range(0, pushes, args.batch):
                batch = [
                    Push(group, "message_received", {"chatId": chat, "seq": n})
                    for n in range(start, min(start + args.batch, pushes))
                ]
                marks = () if marking is None else marking[1].tokens
                results = await publisher.publish(batch, marks=marks)
                if any(result is not None for result in results):
                    raise SystemExit(f"push failed: {results}")
                # A call per event-loop turn, as the floor writes a batch per turn and as the
                # dispatcher's batches come between its statements: a publish that passes the
                # barrier by a mark never yields, and calls run back to back would pile their
                # writes into the transports' buffers once the sockets are full, fewer and
                # larger sends than any real batch gets.
                await asyncio.sleep(0)
        if marking is not None:
            marking[0].cancel()
        server.should_exit = True
        await serving


async def keep_marks(pool: Any, dsn: str) -> tuple[asyncio.Task[None], Any]:
    """A :class:`~realtime_dispatch.dispatch.marks.MarkKeeper` listening on a connection of its
    own and sending its marks through ``pool``, as a runner's (``keeper.mark.tokens``: the marks
    of a batch published now). Returns its task (cancel it to stop; the connection closes with
    it) and the keeper."""
    import asyncpg

    from realtime_dispatch.dispatch.marks import MarkKeeper

    keeper = MarkKeeper(pool)
    listening = await asyncpg.connect(dsn)
    await keeper.attach(listening)

    async def run() -> None:
        try:
            await keeper.run()
        finally:
            await listening.close()

    return asyncio.create_task(run()), keeper


async def marked(hub: Any, dsn: str) -> tuple[asyncio.Task[None], Any]:
    """Membership marks for the batches published (``marks=mark.tokens``), as the dispatcher's
    runner keeps them in ``serve``; returns once the hub's feed has heard one (its barrier is
    then passed without a round trip), with the keeper's task, to cancel at the end, and its
    mark."""
    task, keeper = await keep_marks(hub.membership.pool, dsn)
    heard = hub.membership.heard
    while not (keeper.mark.tokens and heard(keeper.mark.tokens)):  # noqa: ASYNC110 - two feeds
        await asyncio.sleep(0.01)
    return task, keeper.mark


async def http_marks(dsn: str) -> tuple[asyncio.Task[None], Any, Any]:
    """Membership marks for the HTTP batches published (``marks=mark.tokens``), as a worker's
    runner keeps them (its marks sent through a pool of one); returns once it holds one and the
    hub had time to hear it, with the keeper's task, the pool and the mark."""
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    task, keeper = await keep_marks(pool, dsn)
    while not keeper.mark.tokens:  # noqa: ASYNC110 - the keeper's own listener
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # the hub's feed hears the same notification
    return task, pool, keeper.mark


async def hub_barriers(port: int) -> dict[str, float]:
    """The hub's ``membership_barriers_total`` by kind, from its ``/metrics``."""
    import httpx

    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    prefix = "messenger_realtime_hub_membership_barriers_total{kind="
    return {
        line[len(prefix) :].split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


# --- the fan-out alone: Hub.send_to_groups to members on null transports -------------------------


def fanout_main(args: argparse.Namespace) -> None:
    """``Hub.send_to_groups`` in this process, to ``--members`` connections whose transports
    discard what they are given: the fan-out's own CPU per delivery, without the kernel's send
    and without the clients (so much less noisy than the runs over sockets). ``--mix``: every
    member JSON, every member MessagePack, or every other one MessagePack."""
    import orjson

    from realtime_dispatch.delivery.push import Push
    from realtime_dispatch.hub import Hub, HubOptions
    from realtime_dispatch.hub.backplane.publishers import push_frames

    def protocol(index: int) -> str:
        msgpack = args.mix == "messagepack" or (args.mix == "mixed" and index % 2 == 1)
        return "messagepack" if msgpack else "json"

    async def run() -> dict[str, Any]:
        hub = Hub(HubOptions(), pool=None, dsn="postgresql://unused/unused")
        group = "chat:bench"
        for index in range(args.members):
            connection = null_connection(index, uuid.uuid4(), protocol(index))
            hub.new_connection(connection)
            hub.registry.join(connection.connection_id, group)
        chat = str(uuid.uuid4())
        batches = []
        for start in range(0, args.pushes, 8):
            pushes = [
                Push(
                    group,
                    "message_received",
                    payload_json=orjson.dumps(
                        {
                            "chatId": chat,
                            "messageId": str(uuid.uuid4()),
                            "seq": n,
                            "senderUserId": str(uuid.uuid4()),
                            "kind": "Text",
                            "sentAt": "2026-12-01T10:00:00.123456Z",
                            "body": "See you at noon, the usual place?",
                            "eventId": str(uuid.uuid4()),
                        }
                    ),
                )
                for n in range(start, min(start + 8, args.pushes))
            ]
            batches.append(push_frames(pushes))  # what the in-process publisher hands over
        costs = []
        for _ in range(args.runs):
            t0 = time.process_time()
            deliveries = sum(hub.send_to_groups(batch) for batch in batches)
            costs.append((time.process_time() - t0) / deliveries * 1e6)
        assert deliveries == args.pushes * args.members
        return {
            "mode": "fanout",
            "mix": args.mix,
            "members": args.members,
            "deliveries_per_run": deliveries,
            "cpu_us_per_delivery_median": round(statistics.median(costs), 4),
            "cpu_us_per_delivery_range": [round(min(costs), 4), round(max(costs), 4)],
        }

    print(json.dumps(asyncio.run(run())))


# --- python-socketio: rooms and emit to a room --------------------------------------------------


async def socketio_main(args: argparse.Namespace) -> None:
    import socketio
    import uvicorn

    sio = socketio.AsyncServer(async_mode="asgi", logger=False, engineio_logger=False)

    @sio.event  # type: ignore[misc]
    async def connect(sid: str, environ: dict[str, Any]) -> None:
        if "member=1" in environ.get("QUERY_STRING", ""):
            await sio.enter_room(sid, "members")

    config = uvicorn.Config(
        socketio.ASGIApp(sio),
        host="127.0.0.1",
        port=args.port,
        lifespan="off",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        access_log=False,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    await started(server, serving)
    print(json.dumps({"event": "listening"}), flush=True)
    reader = await stdin_lines()
    chat = args.chat
    while line := await reader.readline():
        pushes = json.loads(line)["pushes"]
        for start in range(0, pushes, 8):
            for n in range(start, min(start + 8, pushes)):
                await sio.emit("message_received", {"chatId": chat, "seq": n}, room="members")
            await asyncio.sleep(0)
    server.should_exit = True
    await serving


# --- the Go peers, built from Debian's packages ------------------------------------------------

BUILD = HERE.parents[1] / "build" / "bench-go"
GOPATH_PACKAGES = Path("/usr/share/gocode")
# server: (the folder of its main.go under bench/, its flags)
GO_PEERS = {
    "go-ws": ("go_ws", []),
    "go-ws-joined": ("go_ws", ["-joined"]),
    "centrifuge": ("go_centrifuge", []),
}


def go_binary(source: str) -> Path:
    """``bench/<source>/main.go`` built (GOPATH mode, against Debian's ``/usr/share/gocode``, no
    module fetched) into ``build/bench-go/<source>``, unless built from the same source already
    (its SHA-256 is kept beside the binary)."""
    main_go = HERE / source / "main.go"
    binary = BUILD / source
    built_from = binary.with_name(f"{source}.sha256")
    digest = hashlib.sha256(main_go.read_bytes()).hexdigest()
    if binary.exists() and built_from.exists() and built_from.read_text() == digest:
        return binary
    go = "/usr/bin/go"
    if not Path(go).exists() or not GOPATH_PACKAGES.is_dir():
        raise SystemExit(
            f"{source}: Go and the Debian Go packages are needed for the compiled peers: apt-get"
            " install golang-go golang-github-centrifugal-centrifuge-dev"
            " golang-github-gorilla-websocket-dev golang-github-centrifugal-protocol-dev"
            " golang-github-fzambia-eagle-dev golang-github-igm-sockjs-go-dev"
            " golang-github-mna-redisc-dev"
        )
    (BUILD / "gopath").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{BUILD / 'gopath'}:{GOPATH_PACKAGES}",
        "GOFLAGS": "",
    }
    if "HOME" not in env and "GOCACHE" not in env:
        env["GOCACHE"] = str(BUILD / "cache")
    partial = binary.with_suffix(f".{os.getpid()}")  # two builds at once never meet halfway
    done = subprocess.run(
        [go, "build", "-o", str(partial), "."],
        cwd=HERE / source,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{source}: go build failed:\n{done.stderr}")
    partial.replace(binary)
    built_from.write_text(digest)
    return binary


def go_command(kind: str, port: int, chat: str) -> list[str]:
    source, flags = GO_PEERS[kind]
    return [str(go_binary(source)), *flags, str(port), chat]


# --- driver -------------------------------------------------------------------------------------


SERVERS = (
    "hub",
    "hub-marked",
    "hub-msgpack",
    "hub-mixed",
    "hub-http",
    "hub-http-marked",
    "floor",
    "floor-batched",
    "floor-http",
    "ws",
    "go-ws",
    "go-ws-joined",
    "centrifuge",
    "socketio",
)
HTTP_HUBS = ("hub-http", "hub-http-marked")
PUSHED_OVER_HTTP = (*HTTP_HUBS, "floor-http")
HUBS = ("hub", "hub-marked", "hub-msgpack", "hub-mixed", *HTTP_HUBS)
FLOOR_CHAT = uuid.uuid5(uuid.NAMESPACE_URL, "bench-chat")
CLIENT_PROTOCOL = {
    "socketio": "socketio",
    "hub-msgpack": "messagepack",
    "hub-mixed": "mixed",
    "centrifuge": "centrifuge",
}


async def start_server(
    kind: str, port: int, members: int, dsn: str, batch: int
) -> tuple[Any, tuple[str, str] | None]:
    """The server process, and (for the hub) the benchmark database and chat."""
    bench_dsn, chat = None, "c"
    if kind in HUBS:
        bench_dsn, chat_id = await prepare_database(dsn, members)
        chat = str(chat_id)
    if kind in HTTP_HUBS:
        proc = await asyncio.create_subprocess_exec(
            *module_command("bench.hub.fanout"), "hub", "--port", str(port), "--dsn", str(bench_dsn)
        )
        await wait_http(port)
        return proc, (str(bench_dsn), chat)
    chat_arg = str(FLOOR_CHAT) if kind not in HUBS else chat
    if kind in (*HUBS, "floor", "floor-batched", "floor-http", "socketio"):
        mode = "hub" if kind in HUBS else "floor" if kind == "floor-http" else kind
        command = [*module_command(__spec__.name), mode, "--port", str(port), "--chat", chat_arg]
        if mode == "hub":
            command += ["--dsn", str(bench_dsn), "--batch", str(batch)]
        if kind == "hub-marked":
            command.append("--marks")
    elif kind in GO_PEERS:
        command = go_command(kind, port, chat_arg)
    else:
        command = ["node", str(HERE / "ws_broadcast.mjs"), str(port), chat_arg]
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert json.loads(line)["event"] == "listening", line
    return proc, (str(bench_dsn), chat) if bench_dsn is not None else None


async def measure(kind: str, members: int, args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    port = free_port()
    server, hub_db = await start_server(kind, port, members, dsn, args.batch)
    clients = None
    keeper: tuple[asyncio.Task[None], Any, Any] | None = None
    try:
        if kind == "hub-http-marked":
            assert hub_db is not None
            keeper = await http_marks(hub_db[0])
        await asyncio.sleep(0.5)
        rss_before = rss_kib(server.pid)
        clients = await asyncio.create_subprocess_exec(
            *module_command("bench.hub.fanout"),
            "clients",
            "--port",
            str(port),
            "--clients",
            str(args.clients),
            "--members",
            str(members),
            "--protocol",
            CLIENT_PROTOCOL.get(kind, "hub"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert clients.stdout is not None
        assert clients.stdin is not None
        line = await asyncio.wait_for(clients.stdout.readline(), 180)
        assert json.loads(line)["event"] == "connected", line
        await asyncio.sleep(args.idle_seconds / 2)
        rss_connected = rss_kib(server.pid)
        # The server's CPU with every client connected and nothing pushed (pings, timers): a
        # server that receives pushes more slowly pays more of it per frame.
        idle0 = cpu_seconds_ns(server.pid)
        await asyncio.sleep(args.idle_seconds)
        idle_rate = (cpu_seconds_ns(server.pid) - idle0) / args.idle_seconds
        pushes = args.pushes * 100 // members  # about the same number of deliveries per layout
        rates, cpu_us, net_us = [], [], []
        profiler = None
        if args.perf:  # the server's CPU during the runs only, kernel included
            profiler = await asyncio.create_subprocess_exec(
                "perf",
                "record",
                "-F",
                "999",
                "-g",
                "-p",
                str(server.pid),
                "-o",
                f"{args.perf}.{kind}.{members}",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)
        ticks0, fine0 = cpu_seconds(server.pid), cpu_seconds_ns(server.pid)
        for _ in range(args.runs):
            cpu0 = cpu_seconds_ns(server.pid)
            expect = pushes * members
            clients.stdin.write(json.dumps({"expect": expect}).encode() + b"\n")
            await clients.stdin.drain()
            t0 = time.perf_counter()
            if kind in PUSHED_OVER_HTTP:
                chat_id = uuid.UUID(hub_db[1]) if hub_db is not None else FLOOR_CHAT
                mark = None if keeper is None else keeper[2]
                await fanout_run(
                    port, chat_id, pushes, args.http_concurrency, args.batch, mark=mark
                )
            else:
                server.stdin.write(json.dumps({"pushes": pushes}).encode() + b"\n")
                await server.stdin.drain()
            line = await asyncio.wait_for(clients.stdout.readline(), 300)
            elapsed = time.perf_counter() - t0
            check_received(line, f"{kind} at {members} members")
            rates.append(expect / elapsed)
            cpu = cpu_seconds_ns(server.pid) - cpu0
            cpu_us.append(cpu / expect * 1e6)
            net_us.append((cpu - idle_rate * elapsed) / expect * 1e6)
            await asyncio.sleep(0.5)
        # The threads' nanoseconds against the process's clock ticks (which keep the time of
        # threads that ended): they agree within the ticks' resolution, or the figures are off.
        ticks, fine = cpu_seconds(server.pid) - ticks0, cpu_seconds_ns(server.pid) - fine0
        assert fine > ticks - 0.05 - 0.1 * ticks, (kind, members, "threads ended", ticks, fine)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            await profiler.wait()
        # nothing lost, nothing twice, nothing to anyone else
        clients.stdin.write(json.dumps({"expect": 0}).encode() + b"\n")
        await clients.stdin.drain()
        counts = json.loads(await asyncio.wait_for(clients.stdout.readline(), 60))
        each = pushes * args.runs
        exact = counts["member_min"] == counts["member_max"] == each
        assert exact, (kind, members, each, counts)
        assert counts["others"] == 0, (kind, members, counts)
        barriers = await hub_barriers(port) if kind in HTTP_HUBS else None
        return {
            **({"membership_barriers": barriers} if barriers is not None else {}),
            "server": kind,
            "members": members,
            "deliveries_per_run": pushes * members,
            "frames_per_second_median": round(statistics.median(rates)),
            "frames_per_second_range": [round(min(rates)), round(max(rates))],
            "cpu_us_per_frame_median": round(statistics.median(cpu_us), 3),
            "cpu_us_per_frame_range": [round(min(cpu_us), 3), round(max(cpu_us), 3)],
            "cpu_us_per_frame_net_of_idle_median": round(statistics.median(net_us), 3),
            "idle_cpu_percent": round(idle_rate * 100, 2),
            "rss_kib_per_connection": round((rss_connected - rss_before) / args.clients, 1),
            **({"pushes_per_call": args.batch} if kind in HUBS else {}),
        }
    finally:
        if keeper is not None:
            keeper[0].cancel()
            await keeper[1].close()
        if clients is not None:
            await stop_clients(clients)
        server.terminate()
        await server.wait()
        if hub_db is not None:
            await drop_database(dsn, hub_db[0])


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    for kind in args.servers.split(","):  # built before any run, not during one
        if kind in GO_PEERS:
            go_binary(GO_PEERS[kind][0])
    results = []
    for members in (int(m) for m in args.layouts.split(",")):
        for kind in args.servers.split(","):
            results.append(await measure(kind, members, args))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    ratios = {}
    for members in {r["members"] for r in results}:
        cost = {
            r["server"]: r["cpu_us_per_frame_median"] for r in results if r["members"] == members
        }
        ratios[f"{members}_members"] = {
            f"{hub}_vs_{peer}": round(cost[hub] / value, 2)
            for hub in HUBS
            if hub in cost
            for peer, value in cost.items()
            if peer not in HUBS and value
        }
        for http, local in (
            ("hub-http", "hub"),
            ("hub-http-marked", "hub-marked"),
            ("floor-http", "floor-batched"),
        ):
            if cost.get(local) and http in cost:  # from another process against in-process
                ratios[f"{members}_members"][f"{http}_vs_{local}"] = round(
                    cost[http] / cost[local], 2
                )
        for variant in ("hub-marked", "hub-msgpack", "hub-mixed"):
            if variant in cost and cost.get("hub"):
                ratios[f"{members}_members"][f"{variant}_vs_hub"] = round(
                    cost[variant] / cost["hub"], 2
                )
    return {"clients": args.clients, "results": results, "cpu_ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "mode",
        nargs="?",
        default="driver",
        choices=["driver", "hub", "floor", "floor-batched", "socketio", "fanout", "build"],
    )
    parser.add_argument("--members", type=int, default=100, help="fanout mode")
    parser.add_argument("--mix", choices=["json", "messagepack", "mixed"], default="json")
    parser.add_argument("--dsn")
    parser.add_argument("--marks", action="store_true", help="hub: batches carry membership marks")
    parser.add_argument("--port", type=int)
    parser.add_argument("--chat", default="c")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--layouts", default="100,10")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--pushes", type=int, default=2000, help="pushes at 100 members per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=8, help="hub: pushes per publish call; hub-http: per request"
    )
    parser.add_argument("--http-concurrency", type=int, default=8, help="hub-http: in flight")
    parser.add_argument(
        "--perf",
        metavar="PREFIX",
        help="record each server's runs with `perf record -g` into PREFIX.<server>.<members>",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=2.0, help="of the idle CPU measured per server"
    )
    # The smoke leaves out ``hub`` and ``hub-http``: ``hub-marked`` and ``hub-http-marked`` run
    # their paths with marks, ``hub-msgpack`` and ``hub-mixed`` with the barrier's round trip.
    smoke = {
        "clients": 40,
        "layouts": "10",
        "pushes": 100,
        "runs": 1,
        "idle_seconds": 0.5,
        "servers": ",".join(server for server in SERVERS if server not in ("hub", "hub-http")),
    }
    args = parse_with_smoke(parser, smoke)
    if args.mode == "fanout":
        fanout_main(args)
    elif args.mode == "build":  # the Go peers, for `make bench-peers`
        for source in sorted({source for source, _ in GO_PEERS.values()}):
            print(go_binary(source))
    elif args.mode != "driver":
        import uvloop

        server = {"hub": hub_main, "socketio": socketio_main}.get(args.mode, floor_main)
        uvloop.run(server(args))
    else:
        print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
