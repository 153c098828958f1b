"""Serving the hub with uvicorn: :func:`run_hub` (what ``realtime-dispatch hub`` runs) and
:class:`HubServer`, a uvicorn server that sends every hub connection a close message before
uvicorn's own shutdown closes the sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Generator, Sequence

import asyncpg
import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame
from websockets.http11 import Request

from realtime_dispatch.delivery.push import BATCH_PATH
from realtime_dispatch.edge.gc_sweep import GC_SWEEP_DELAY, GarbageSweep
from realtime_dispatch.edge.http_protocol import (
    DirectPost,
    DirectUpgrade,
    HttpLimits,
    guarded_http_protocol,
)
from realtime_dispatch.edge.request_guard import BodyRule, RequestGuard
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.hub.runtime import Hub, HubOptions
from realtime_dispatch.hub.serving.push_api import DirectBatch
from realtime_dispatch.hub.serving.routes import HUB_PATH, hub_body_rules, hub_routes
from realtime_dispatch.hub.transports.ws_direct import DirectWebSocket
from realtime_dispatch.hub.wire.framing import RAW_TRANSPORT_EXTENSION
from realtime_dispatch.telemetry.logs import RedactSecrets

MAX_WS_FRAME_BYTES = 1 << 20
"""uvicorn's hard limit; the hub itself refuses inbound messages over 32 KB with a close message."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DropDenialNoise(logging.Filter):
    """uvicorn's sans-I/O WebSocket protocol logs an error after an app answered the upgrade
    with an HTTP denial response (our 401), although that response was sent as asked."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "ASGI callable returned without completing handshake."


def redact_uvicorn_logs() -> None:
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        for kind in (RedactSecrets, DropDenialNoise):
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())


class HubWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol that also hands the app its transport (scope
    extension ``realtime_dispatch.raw_transport``), so the hub writes pre-built frames straight
    to it instead of framing every record again per member through ASGI ``send``.

    Every change to whether the transport takes writes is told to the sink's ``watcher`` at
    once (:meth:`~.framing.RawSink.watch`): flow control, ``close_sent`` (set wherever uvicorn
    sends a close frame), a close frame received, the peer's end, shutdown and the transport's
    loss; uvicorn closes the transport only after one of them."""

    on_connection_lost: Callable[[], None] | None = None
    """Set by the HTTP protocol that upgraded the connection: frees its per-address place."""
    watcher: Callable[[], None] | None = None
    _close_sent = False

    @property
    def close_sent(self) -> bool:
        return self._close_sent

    @close_sent.setter
    def close_sent(self, sent: bool) -> None:
        self._close_sent = sent
        self._changed()

    def connection_lost(self, exc: Exception | None) -> None:
        callback, self.on_connection_lost = self.on_connection_lost, None
        if callback is not None:
            callback()
        super().connection_lost(exc)
        self._changed()

    def eof_received(self) -> None:
        super().eof_received()
        self.transport.close()  # as the transport would on return: nothing may follow the end
        self._changed()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._changed()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._changed()

    def handle_close(self, event: Frame) -> None:
        super().handle_close(event)
        self._changed()

    def shutdown(self) -> None:
        super().shutdown()
        self._changed()

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.response.status_code == 101:  # the ASGI task starts on the next loop turn
            self.scope["extensions"][RAW_TRANSPORT_EXTENSION] = {"server": self}

    def _changed(self) -> None:
        watcher = self.watcher
        if watcher is not None:
            watcher()


class HubServer(uvicorn.Server):
    """uvicorn's server for a hub: its connections told before the sockets close, and, with a
    ``sweep`` (whose ``ended`` the config's HTTP protocol calls), the sweep run while serving.
    ``handoff``: a worker's end of its parent's channel (``hub --workers N``,
    :mod:`realtime_dispatch.cli.workers`): the connections the parent accepted arrive on it as
    file descriptors and are served as if this server had accepted them; the parent closing
    the channel stops the server."""

    def __init__(
        self,
        config: uvicorn.Config,
        hub: Hub,
        *,
        install_signal_handlers: bool = True,
        handoff: socket.socket | None = None,
        sweep: GarbageSweep | None = None,
    ) -> None:
        super().__init__(config)
        self._hub = hub
        self._install_signal_handlers = install_signal_handlers
        self._handoff = handoff
        self._sweep = sweep
        self._handed: set[asyncio.Task[object]] = set()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if self._sweep is None:
            await super().serve(sockets)
            return
        sweeping = asyncio.create_task(self._sweep.run(), name="hub:gc-sweep")
        try:
            await super().serve(sockets)
        finally:
            sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeping

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._handoff is not None and self.started:
            self._handoff.setblocking(False)
            asyncio.get_running_loop().add_reader(self._handoff.fileno(), self._take_handoffs)

    def _take_handoffs(self) -> None:
        """Read the connections the parent handed over (one descriptor per message)."""
        channel = self._handoff
        assert channel is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(channel, 16, 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the parent is gone: stop
                self._stop_handoffs()
                self.should_exit = True
                return
            for fd in fds:
                sock = socket.socket(fileno=fd)
                if self.should_exit:
                    sock.close()
                    continue
                task = loop.create_task(loop.connect_accepted_socket(self._protocol, sock))
                self._handed.add(task)
                task.add_done_callback(self._handed.discard)

    def _protocol(self) -> asyncio.Protocol:
        """What uvicorn's own listener builds for a connection it accepted."""
        protocol: asyncio.Protocol = self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol

    def _stop_handoffs(self) -> None:
        if self._handoff is not None and self._handoff.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(self._handoff.fileno())
            self._handoff.close()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """SIGTERM/SIGINT start a graceful shutdown; unlike uvicorn's own handling the signal is
        not raised again afterwards, so a clean stop exits with status 0."""
        if not self._install_signal_handlers or (
            threading.current_thread() is not threading.main_thread()
        ):
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._stop_handoffs()
        await self._hub.close_connections()
        await super().shutdown(sockets)


def guarded(app: ASGIApp, hub: Hub, rules: Sequence[BodyRule] = ()) -> RequestGuard:
    """``app`` behind the request guard: the hub's body rules, then ``rules`` (REST's, say);
    tokens checked by the hub's verifier."""
    return RequestGuard(
        app,
        rules=[*hub_body_rules(), *rules],
        check_token=hub.verifier.verify,
        service_key=hub.options.service_key,
    )


def uvicorn_config(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    log_level: str,
    http_limits: HttpLimits | None = None,
    hub: Hub | None = None,
    uds: str | None = None,
    ended: Callable[[], None] | None = None,
) -> uvicorn.Config:
    """uvicorn's configuration for the hub: its WebSocket protocol, and the HTTP protocol with
    header and body timeouts, the head cap, the per-address connection cap and the trusted
    proxies (``http_limits``). With the ``hub``, its refusals count on its ``/metrics``, and its
    WebSockets (:class:`~.ws_direct.DirectWebSocket`) and its batch endpoint
    (:class:`~.push_api.DirectBatch`) are served directly, not through ``app``. ``uds``: listen
    on that Unix socket instead of ``host:port`` (a worker of ``--workers N``). ``ended`` is
    told of every connection's end (:class:`~realtime_dispatch.edge.gc_sweep.GarbageSweep`)."""
    direct: dict[str, DirectUpgrade] = {}
    posts: dict[str, DirectPost] = {}
    refusals = None
    if hub is not None:
        direct[HUB_PATH] = lambda state: DirectWebSocket(hub, state.connections)
        posts[BATCH_PATH] = DirectBatch(hub)
        refusals = hub.http_refusals
    protocol = guarded_http_protocol(
        http_limits or HttpLimits(), direct=direct, posts=posts, refusals=refusals, ended=ended
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        uds=uds,
        http=protocol,
        lifespan="off",
        ws_ping_interval=None,  # SignalR pings only: some clients break on WebSocket pings
        ws_ping_timeout=None,
        ws=HubWebSocketProtocol,
        ws_max_size=MAX_WS_FRAME_BYTES,
        ws_per_message_deflate=False,
        access_log=False,
        log_level=log_level,
        timeout_graceful_shutdown=5,
        # A restarted replica takes all its clients back at once: a deeper accept queue (the
        # kernel caps it at net.core.somaxconn) keeps their SYNs from being dropped and
        # retransmitted seconds later.
        backlog=4096,
    )
    redact_uvicorn_logs()
    return config


async def run_hub(
    options: HubOptions,
    *,
    dsn: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "info",
    pool: asyncpg.Pool | None = None,
    metrics_registry: CollectorRegistry | None = None,
    extra_routes: Sequence[BaseRoute] = (),
    extra_rules: Sequence[BodyRule] = (),
    http_limits: HttpLimits | None = None,
    install_signal_handlers: bool = True,
    gc_sweep_delay: float = GC_SWEEP_DELAY,
) -> None:
    """Serve the hub (negotiate, WebSocket, push endpoint, health, metrics, plus
    ``extra_routes``) until SIGTERM/SIGINT. Raises if a background task of the hub dies. A full
    collection runs ``gc_sweep_delay`` seconds after connections end
    (:mod:`~realtime_dispatch.edge.gc_sweep`; 0: none)."""
    async with Hub(options, pool=pool, dsn=dsn, metrics_registry=metrics_registry) as hub:
        app = Starlette(routes=[*hub_routes(hub), *extra_routes])
        sweep = GarbageSweep(gc_sweep_delay) if gc_sweep_delay > 0 else None
        config = uvicorn_config(
            guarded(app, hub, extra_rules),
            host=host,
            port=port,
            log_level=log_level.lower(),
            http_limits=http_limits,
            hub=hub,
            ended=sweep.ended if sweep is not None else None,
        )
        server = HubServer(
            config, hub, install_signal_handlers=install_signal_handlers, sweep=sweep
        )

        async def stop_on_failure() -> None:
            await hub.failed.wait()
            server.should_exit = True

        watcher = asyncio.create_task(stop_on_failure(), name="hub:failure-watch")
        try:
            await server.serve()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if hub.failed.is_set():
            raise RealtimeDispatchError("a hub background task failed", code="HubTaskFailed")
