"""An ASGI app of the hub alone, its :class:`~.runtime.Hub` entered and left by the lifespan.

For a bigger app (REST + hub), enter a :class:`~.runtime.Hub` in that app's lifespan and mount
``hub_routes(hub)`` instead, and put :class:`~realtime_dispatch.edge.request_guard.RequestGuard`
with :func:`~.routes.hub_body_rules` in front of it (``serve`` does:
``hub.serving.server.guarded``).
The header and body timeouts and the per-address cap live in the HTTP protocol
(:mod:`~realtime_dispatch.edge.http_protocol`): they apply under ``serve`` / ``run_hub``, or with
``uvicorn_config``'s protocol class, not under another server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware

from realtime_dispatch.edge.request_guard import RequestGuard
from realtime_dispatch.hub.runtime import Hub, HubOptions
from realtime_dispatch.hub.serving.routes import hub_body_rules, hub_routes


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

    guard = Middleware(
        RequestGuard,
        rules=hub_body_rules(),
        check_token=hub.verifier.verify,
        service_key=options.service_key,
    )
    app = Starlette(routes=hub_routes(hub), lifespan=lifespan, middleware=[guard])
    app.state.hub = hub
    return app
