"""``worker --port P``: the worker's /metrics, /healthz and /readyz under uvicorn, beside the
dispatcher, for as long as the block runs. Without a port there is no HTTP server at all, so any
number of workers start side by side on one host (as the test suites start them)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette

from realtime_dispatch.dispatch.probes import worker_routes
from realtime_dispatch.dispatch.service import DispatchService


class _ProbeServer(uvicorn.Server):
    # The worker handles SIGTERM/SIGINT itself (and stops this server with the dispatcher).
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


@contextlib.asynccontextmanager
async def probe_server(
    service: DispatchService, *, host: str, port: int | None, log_level: str
) -> AsyncIterator[None]:
    if port is None:
        yield
        return
    app = Starlette(
        routes=worker_routes(service.runners, service.metrics.registry, alive=service.alive)
    )
    config = uvicorn.Config(
        app, host=host, port=port, lifespan="off", access_log=False, log_level=log_level
    )
    server = _ProbeServer(config)
    # Bound here, so a port in use fails the start with an OSError (exit 1) instead of a
    # server task that dies on its own.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    task = asyncio.create_task(server.serve(sockets=[sock]), name="worker-probes")
    print(
        f"realtime-dispatch: worker probes on http://{host}:{port} (/metrics /healthz /readyz)",
        file=sys.stderr,
        flush=True,
    )
    try:
        yield
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 10)
        sock.close()
