"""Test harness for the hub: a real uvicorn server on a free port in the test's event loop,
and a minimal raw SignalR JSON client on ``websockets`` for wire-level assertions."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import orjson
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from websockets.asyncio.client import ClientConnection, connect

from realtime_dispatch.edge.http_protocol import HttpLimits
from realtime_dispatch.hub.runtime import Hub, HubOptions
from realtime_dispatch.hub.serving.routes import hub_routes
from realtime_dispatch.hub.serving.server import HubServer, uvicorn_config
from realtime_dispatch.settings import Settings
from support.hub_wire import RS, SECRET, SERVICE_KEY
from support.procs import free_port


def hub_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "hub_jwt_secret": SECRET,
        "hub_service_key": SERVICE_KEY,
        "log_level": "warning",
    }
    values.update(overrides)
    return Settings(**values)


async def create_shared_chat(
    conn: Any, *, creator: uuid.UUID, title: str, members: Sequence[uuid.UUID]
) -> uuid.UUID:
    """A chat every member took part in (each sent a message): presence shows through it
    (the reference messenger's consent rule, manifest query ``presence_chats``)."""
    from realtime_dispatch.messenger.commands import create_chat, send_message

    chat = await create_chat(conn, creator=creator, title=title, members=list(members))
    for member in members:
        await send_message(conn, chat_id=chat, sender=member, body="hi")
    return chat


@dataclass
class RunningHub:
    hub: Hub
    port: int
    server: HubServer

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/hubs/messenger"


@contextlib.asynccontextmanager
async def running_hub(
    settings: Settings,
    *,
    dsn: str,
    pool: Any = None,
    redis_url: str | None = None,
    options: HubOptions | None = None,
    registry: CollectorRegistry | None = None,
    plain_asgi: bool = False,
    direct: bool = True,
    http_limits: HttpLimits | None = None,
    ended: Callable[[], None] | None = None,
) -> AsyncIterator[RunningHub]:
    """A started :class:`Hub` served by uvicorn on a free port (in this event loop), its
    WebSockets and batch endpoint served directly as ``realtime-dispatch hub`` serves them;
    ``direct=False`` serves them through the ASGI app (uvicorn's WebSocket protocol with the
    raw transport), ``plain_asgi`` with uvicorn's stock WebSocket protocol (no raw transport)."""
    if options is None:
        options = settings.hub_options(redis_url=redis_url)
    async with Hub(options, pool=pool, dsn=dsn, metrics_registry=registry) as hub:
        port = free_port()
        app = Starlette(routes=hub_routes(hub))
        config = uvicorn_config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            http_limits=http_limits,
            hub=hub if direct and not plain_asgi else None,
            ended=ended,
        )
        if plain_asgi:
            config.ws = "websockets-sansio"
        server = HubServer(config, hub, install_signal_handlers=False)
        task = asyncio.create_task(server.serve(), name="test-hub-server")
        try:
            async with asyncio.timeout(10):
                while not server.started:
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.01)
            await hub.wait_ready()
            yield RunningHub(hub, port, server)
        finally:
            server.should_exit = True
            await task


def options_for(settings: Settings, **changes: Any) -> HubOptions:
    import dataclasses

    return dataclasses.replace(settings.hub_options(), **changes)


@dataclass
class RawClient:
    """A SignalR JSON-protocol client speaking raw frames, for wire-level assertions."""

    ws: ClientConnection
    _records: list[dict[str, Any]] = field(default_factory=list)
    _partial: str = ""

    async def send(self, text: str | bytes) -> None:
        await self.ws.send(text)

    async def send_record(self, value: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(value).decode() + RS)

    async def handshake(self, version: int = 1) -> dict[str, Any]:
        await self.send_record({"protocol": "json", "version": version})
        return await self.next()

    async def next(self, within: float = 5.0) -> dict[str, Any]:
        """The next record (any type)."""
        async with asyncio.timeout(within):
            while not self._records:
                data = await self.ws.recv()
                text = data if isinstance(data, str) else data.decode()
                *complete, self._partial = (self._partial + text).split(RS)
                self._records.extend(orjson.loads(r) for r in complete)
        return self._records.pop(0)

    async def next_of(self, types: Sequence[int], within: float = 5.0) -> dict[str, Any]:
        """The next record of one of ``types``, skipping pings."""
        while True:
            record = await self.next(within)
            if record.get("type") in types:
                return record

    async def invocations(self, count: int, within: float = 5.0) -> list[dict[str, Any]]:
        return [await self.next_of([1], within) for _ in range(count)]

    async def assert_silent(self, seconds: float) -> None:
        """No invocation arrives within ``seconds`` (pings are ignored)."""
        with contextlib.suppress(TimeoutError):
            record = await self.next_of([1], within=seconds)
            raise AssertionError(f"unexpected record {record}")

    async def close(self) -> None:
        await self.ws.close()


@contextlib.asynccontextmanager
async def raw_client(
    running: RunningHub,
    token: str | None,
    *,
    id_param: str | None = None,
    in_query: bool = False,
    handshake: int | None = 1,
) -> AsyncIterator[RawClient]:
    params: dict[str, str] = {}
    headers: dict[str, str] = {}
    if id_param is not None:
        params["id"] = id_param
    if token is not None:
        if in_query:
            params["access_token"] = token
        else:
            headers["Authorization"] = f"Bearer {token}"
    url = str(httpx.URL(running.ws_url, params=params))
    async with connect(url, additional_headers=headers, ping_interval=None, max_size=None) as ws:
        client = RawClient(ws)
        if handshake is not None:
            assert await client.handshake(handshake) == {}
        yield client


async def negotiate(
    running: RunningHub, token: str | None, *, version: int = 1, stateful: bool = False
) -> httpx.Response:
    params = {"negotiateVersion": str(version)}
    if stateful:
        params["useStatefulReconnect"] = "true"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=running.http_url) as http:
        return await http.post("/hubs/messenger/negotiate", params=params, headers=headers)


async def push(running: RunningHub, group: str, target: str, payload: dict[str, Any]) -> None:
    """Publish through the hub's own publisher (in-process or backplane)."""
    from realtime_dispatch.delivery.push import Push

    [result] = await running.hub.publisher().publish([Push(group, target, payload)])
    assert result is None, result


# --- real clients in other processes, and a TCP proxy to cut their transport ------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


NODE_TRANSPORTS = [
    ("WebSockets", "json"),
    ("WebSockets", "messagepack"),
    ("ServerSentEvents", "json"),
    ("LongPolling", "json"),
    ("LongPolling", "messagepack"),
]
"""Every (transport, hub protocol) pair the official client can use (MessagePack is binary:
not over Server-Sent Events)."""


def require_node_client() -> None:
    """The JS tests need ``npm ci`` to have run; a missing install is a failure, not a skip."""
    import shutil

    import pytest

    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: the hub e2e tests need Node.js")
    if not (REPO / "node_modules" / "@microsoft" / "signalr").is_dir():
        pytest.fail("node_modules/@microsoft/signalr is missing: run `npm ci` in the repo root")


class NodeClient:
    """``tests/js/hub_client.mjs`` as a subprocess, exchanging JSON lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(
        cls,
        url: str,
        token: str | None,
        *,
        stateful: bool = False,
        targets: Sequence[str] = (),
        mint: dict[str, Any] | None = None,
        **options: object,
    ) -> NodeClient:
        """``mint`` (``secret``, ``user``, ``ttls``) instead of ``token``: the client's token
        factory signs a fresh token once the last expired. ``options``: ``transport``
        (``WebSockets``, ``ServerSentEvents``, ``LongPolling``), ``protocol`` (``json``,
        ``messagepack``), ``reconnect`` (automatic reconnect: True, or its delays)."""
        require_node_client()
        config: dict[str, Any] = {
            "url": url,
            "token": token,
            "stateful": stateful,
            "targets": list(targets),
            **options,
        }
        if mint is not None:
            config["mint"] = mint
        process = await asyncio.create_subprocess_exec(
            "node",
            str(REPO / "tests" / "js" / "hub_client.mjs"),
            orjson.dumps(config).decode(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=REPO,
        )
        return cls(process)

    async def event(self, within: float = 10.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        async with asyncio.timeout(within):
            line = await self.process.stdout.readline()
        if not line:
            raise AssertionError("node client exited")
        value: dict[str, Any] = orjson.loads(line)
        return value

    async def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(command) + b"\n")
        await self.process.stdin.drain()

    async def stop(self) -> None:
        if self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                async with asyncio.timeout(10):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream_port``. :meth:`cut` aborts every forwarded
    connection (a transport blip) and holds new ones until :meth:`release`; :meth:`stall`
    stops forwarding bytes either way on open connections, which stay open (a peer that hangs),
    until :meth:`resume`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = asyncio.Event()
        self._open.set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        self._open.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> None:
        self._open.clear()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def release(self) -> None:
        self._open.set()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._open.wait()
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            self._writers.update({writer, up_writer})
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
            )
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


class SlowPostgresProxy:
    """Forwards 127.0.0.1:``port`` to the PostgreSQL server behind ``dsn`` (TCP or unix socket)
    and holds every byte the server sends for ``delay`` seconds, in order: a session behind it,
    such as a hub's ``LISTEN`` connection, learns of every notification that much later."""

    def __init__(self, dsn: str, delay: float) -> None:
        self.dsn = dsn
        self.delay = delay
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._upstream: tuple[str, int] | str | None = None

    @property
    def url(self) -> str:
        """``dsn`` pointed at this proxy."""
        parts = urlsplit(self.dsn)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(("postgresql", f"{user}127.0.0.1:{self.port}", parts.path, "", ""))

    async def __aenter__(self) -> SlowPostgresProxy:
        conn = await asyncpg.connect(self.dsn)
        try:
            host = await conn.fetchval("SELECT host(inet_server_addr())")
            port = int(await conn.fetchval("SHOW port"))
            folder = (await conn.fetchval("SHOW unix_socket_directories")).split(",")[0].strip()
        finally:
            await conn.close()
        self._upstream = (host, port) if host else f"{folder}/.s.PGSQL.{port}"
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.refuse()

    async def refuse(self) -> None:
        """The database goes away: every forwarded session is cut and new connections to the
        proxy's port are refused, until :meth:`accept`."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def accept(self) -> None:
        """The database is back, on the same port."""
        assert self._server is None
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream = self._upstream
        try:
            if isinstance(upstream, str):
                up_reader, up_writer = await asyncio.open_unix_connection(upstream)
            else:
                assert upstream is not None
                up_reader, up_writer = await asyncio.open_connection(*upstream)
            await asyncio.gather(
                self._pipe(reader, up_writer, 0.0),
                self._pipe(up_reader, writer, self.delay),
                return_exceptions=True,
            )
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(65536):
                if delay:
                    # Each chunk leaves `delay` after it arrived; order is kept.
                    loop.call_later(delay, writer.write, data)
                else:
                    writer.write(data)
                    await writer.drain()
        finally:
            if delay:
                await asyncio.sleep(delay)
            writer.transport.abort()
