"""``run_hub`` in its own process: serves real clients, and on SIGTERM sends every connection a
close message (reconnect allowed) and exits 0."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid

import pytest

from support.hub_wire import SECRET, SERVICE_KEY, make_token
from support.procs import free_port, wait_ready
from tests.hub_fixtures import RunningHub, raw_client

pytestmark = pytest.mark.e2e

SCRIPT = """
import asyncio, sys
from realtime_dispatch.hub import HubOptions
from realtime_dispatch.hub.serving.server import run_hub
options = HubOptions(jwt_secret=sys.argv[1], service_key=sys.argv[2])
asyncio.run(
    run_hub(options, host="127.0.0.1", port=int(sys.argv[3]), dsn=sys.argv[4], log_level="warning")
)
"""


async def test_sigterm_sends_close_message_and_exits_cleanly(database_url):
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, SECRET, SERVICE_KEY, str(port), database_url
    )
    try:
        await wait_ready(process, f"http://127.0.0.1:{port}", within=15)
        running = RunningHub(hub=None, port=port, server=None)  # type: ignore[arg-type]
        async with raw_client(running, make_token(uuid.uuid4())) as client:
            process.send_signal(signal.SIGTERM)
            close = await client.next_of([7])
            assert close["allowReconnect"] is True
        async with asyncio.timeout(15):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
