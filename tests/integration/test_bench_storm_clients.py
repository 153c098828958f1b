"""The reconnect storm's client (``bench/e2e/_storm_clients.py``) against the real messenger: an
attempt whose socket the server closes before answering the WebSocket upgrade (a replica killed
or restarting with the request still in its backlog) is a failed attempt, retried, so the
client comes back. picows resolves ``ws_connect`` without an error in that case and never calls
the listener, which once left a few clients of every storm disconnected for good."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from uuid import uuid4

import asyncpg

from support.hub_wire import make_token
from support.procs import wait_until
from tests.integration.client_stack import messenger_stack

BENCH = Path(__file__).resolve().parents[2] / "bench"


def storm_clients() -> ModuleType:
    path = BENCH / "e2e" / "_storm_clients.py"
    spec = importlib.util.spec_from_file_location("_storm_clients", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_storm_clients", module)
    spec.loader.exec_module(module)
    return module


@contextlib.asynccontextmanager
async def closing_front(target_port: int, drops: int) -> AsyncIterator[tuple[int, list[int]]]:
    """A loopback TCP front to the hub: its first ``drops`` connections are closed once their
    upgrade request has arrived, unanswered; later ones are piped to the hub both ways."""
    dropped: list[int] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(dropped) < drops:
            await reader.readuntil(b"\r\n\r\n")
            dropped.append(1)
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], dropped
    finally:
        server.close()


async def test_a_connection_closed_before_the_upgrade_answer_is_retried(
    database_url: str, pool: asyncpg.Pool
) -> None:
    module = storm_clients()
    async with messenger_stack(database_url, pool, dispatcher=False) as stack:
        port = int(stack.url.rsplit(":", 1)[1])
        async with closing_front(port, drops=2) as (front, dropped):
            shared = module.Shared(
                {"ws": f"ws://127.0.0.1:{front}/hubs/messenger", "rest": stack.url}
            )
            user = uuid4()
            client = module.Client(shared, str(user), make_token(user), "127.0.0.1")
            try:
                await asyncio.wait_for(client.reconnect(), 30)
                await wait_until(lambda: client.live_at is not None, within=20)
                assert client.handshaken  # live through a real handshake and sync, not stuck
            finally:
                client.stop()
                for task in list(shared.tasks):
                    task.cancel()
                await asyncio.gather(*shared.tasks, return_exceptions=True)
                await shared.aclose()
            assert len(dropped) == 2
            assert shared.hub_refusals["ClosedBeforeUpgrade"] == 2
