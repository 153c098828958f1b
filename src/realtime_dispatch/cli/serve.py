"""``serve`` and ``hub``: the hub (and later the REST API) in one ASGI app under uvicorn, with the
dispatcher pushing through the in-process publisher (``serve``) or without it (``hub``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from uuid import uuid4

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from realtime_dispatch.cli.database import database_url
from realtime_dispatch.cli.devsecrets import with_dev_secrets
from realtime_dispatch.cli.errors import EXIT_FAILURE, EXIT_OK
from realtime_dispatch.cli.tokens import mint_token
from realtime_dispatch.database import create_pool
from realtime_dispatch.dispatch.service import DispatchService, dispatch_service
from realtime_dispatch.hub import Hub
from realtime_dispatch.hub.server import HubServer, uvicorn_config
from realtime_dispatch.settings import Settings


@contextlib.asynccontextmanager
async def _maybe_dispatcher(
    enabled: bool, url: str, settings: Settings, hub: Hub, registry: CollectorRegistry
) -> AsyncIterator[DispatchService | None]:
    if not enabled:
        yield None
        return
    async with dispatch_service(
        url, settings.dispatch_options(), hub.publisher(), registry=registry
    ) as service:
        yield service


async def serve(settings: Settings, *, host: str, port: int, with_dispatcher: bool) -> int:
    settings = with_dev_secrets(settings, create=True)
    assert settings.hub_jwt_secret is not None
    registry = CollectorRegistry()
    async with database_url(settings, run_migrations=True) as url:
        pool = await create_pool(url, min_size=1, max_size=10)
        try:
            async with (
                Hub(settings, pool=pool, dsn=url, metrics_registry=registry) as hub,
                _maybe_dispatcher(with_dispatcher, url, settings, hub, registry),
            ):
                app = Starlette(routes=[*hub.routes])
                server = HubServer(
                    uvicorn_config(app, host=host, port=port, log_level=settings.log_level), hub
                )
                demo_user = uuid4()
                token = mint_token(settings.hub_jwt_secret.get_secret_value(), demo_user)
                print(
                    f"realtime-dispatch: listening on http://{host}:{port}"
                    f" (hub /hubs/messenger{', dispatcher on' if with_dispatcher else ''})\n"
                    f"realtime-dispatch: a token for user {demo_user}: {token}",
                    file=sys.stderr,
                    flush=True,
                )
                await server.serve()
                failed = hub.failed.is_set()
        finally:
            await pool.close()
    return EXIT_FAILURE if failed else EXIT_OK
