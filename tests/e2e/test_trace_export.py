"""A real ``worker`` process exports its pass and row spans over OTLP/HTTP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set."""

import contextlib
import signal
from collections.abc import AsyncIterator

import asyncpg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from support.procs import cli_env, start_cli, stop
from tests.integration.support import new_chat, send, wait_done
from tests.local_server import serving


@contextlib.asynccontextmanager
async def collector(bodies: list[bytes]) -> AsyncIterator[str]:
    """Accepts pushes (hub push endpoint) and OTLP trace exports on one port."""

    async def push(_: Request) -> Response:
        return Response(status_code=202)

    async def traces(request: Request) -> Response:
        bodies.append(await request.body())
        return Response(status_code=200, media_type="application/x-protobuf")

    app = Starlette(
        routes=[
            Route("/api/v1/hubs/messenger/groups/{group}", push, methods=["POST"]),
            Route("/v1/traces", traces, methods=["POST"]),
        ]
    )
    async with serving(app) as url:
        yield url


async def test_worker_exports_spans_over_otlp(pool: asyncpg.Pool, database_url: str) -> None:
    bodies: list[bytes] = []
    chat, sender = await new_chat(pool)
    async with collector(bodies) as url:
        env = cli_env(
            REALTIME_DATABASE_URL=database_url,
            REALTIME_HUB_URL=url,
            REALTIME_HUB_SERVICE_KEY="k",
            OTEL_EXPORTER_OTLP_ENDPOINT=url,
            OTEL_BSP_SCHEDULE_DELAY="200",
        )
        worker = await start_cli("worker", env=env)
        try:
            sent = await send(pool, chat, sender, "traced")

            await wait_done(pool, sent.outbox_id)
        finally:
            assert await stop(worker, signal.SIGTERM) == 0  # flushes pending spans
    exported = b"".join(bodies)
    assert b"realtime_dispatch.pass" in exported
    assert b"realtime_dispatch.row" in exported
    assert str(sent.outbox_id).encode() in exported  # links the row span to the owner's intent
    assert b"realtime-dispatch-worker" in exported  # service.name
    assert b"traced" not in exported  # never a body
