"""What the browser and JavaScript SDK tests share: Chromium and its flags, a `serve` process
for a page to talk to, and the TypeScript SDK built and driven from Node."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import orjson

from support.hub_wire import make_token
from support.procs import cli_env, free_port, start_cli, stop, wait_ready
from tests.hub_fixtures import REPO, NodeClient, require_node_client

CHROMIUM = "/usr/bin/chromium"
TARGETS = ["message_received", "call_invited"]


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.asynccontextmanager
async def serve(database_url: str, data_dir: Path, **extra: str) -> AsyncIterator[str]:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_DATA_DIR=str(data_dir),
        REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
        **extra,
    )
    proc = await start_cli("serve", "--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"
    drains = [asyncio.create_task(s.read()) for s in (proc.stdout, proc.stderr) if s is not None]
    try:
        await wait_ready(proc, url)
        yield url
    finally:
        code = await stop(proc)
        await asyncio.gather(*drains)
    assert code == 0


def build_sdk() -> None:
    """``clients/js/dist``, what the driver imports (as ``test_js_sdk`` builds it)."""
    require_node_client()
    built = subprocess.run(
        ["node_modules/.bin/tsc", "-p", "clients/js"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr


async def sdk_client(
    url: str, user: UUID, transport: str, targets: list[str] = TARGETS
) -> NodeClient:
    """``tests/js/sdk_client.mjs``: the TypeScript SDK with its own resync hook."""
    config = {"url": url, "token": make_token(user), "transport": transport, "targets": targets}
    process = await asyncio.create_subprocess_exec(
        "node",
        str(REPO / "tests" / "js" / "sdk_client.mjs"),
        orjson.dumps(config).decode(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    return NodeClient(process)
