"""An ASGI app of the hub alone, its :class:`~.runtime.Hub` entered and left by the lifespan.

For a bigger app (REST + hub), enter a :class:`~.runtime.Hub` in that app's lifespan and mount
``hub_routes(hub)`` instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from realtime_dispatch.hub.routes import hub_routes
from realtime_dispatch.hub.runtime import Hub, HubOptions


def create_hub_app(
    options: HubOptions,
    *,
    dsn: str,
    pool: asyncpg.Pool | None = None,
    metrics_registry: CollectorRegistry | None = None,
) -> Starlette:
    """The hub as a Starlette app; ``app.state.hub`` is its :class:`Hub`."""
    hub = Hub(options, pool=pool, dsn=dsn, metrics_registry=metrics_registry)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with hub:
            yield

    app = Starlette(routes=hub_routes(hub), lifespan=lifespan)
    app.state.hub = hub
    return app
