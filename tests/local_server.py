"""An ASGI app served by uvicorn in the test's own event loop, on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from support.procs import free_port, wait_until


@contextlib.asynccontextmanager
async def serving(app: Any, *, force_exit: bool = False) -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://127.0.0.1:port``).
    ``force_exit``: at the end, close the connections still open without waiting for them."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_until(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = force_exit
        await asyncio.wait_for(task, 10)
