"""`GET /api/sync` in this process: the REST API with the sync route, and a client that reads
its pages to the end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import asyncpg
import httpx

from realtime_dispatch.auth.tokens import TokenVerifier
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger.api import create_api
from realtime_dispatch.sync.routes import sync_routes
from realtime_dispatch.sync.service import SyncOptions, SyncService
from support.hub_wire import SECRET, make_token
from tests.hub_fixtures import hub_settings
from tests.integration.messenger_world import MEDIA


class Sync:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def get(self, user: UUID | None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {make_token(user)}"} if user else {}
        return await self.http.get("/api/sync", params=params, headers=headers)

    async def cursor(self, user: UUID) -> str:
        r = await self.get(user)
        assert r.status_code == 200, r.text
        assert r.json()["events"] == []
        assert r.json()["limited"] is False
        return str(r.json()["nextCursor"])

    async def drain(self, user: UUID, since: str, limit: int = 100) -> tuple[list[Any], str]:
        """Every page until the last for now (no ``more``): the events and the cursor after
        them. A page with ``more`` may be short: a row it could not build, or its scan bound."""
        events: list[Any] = []
        while True:
            r = await self.get(user, since=since, limit=limit)
            assert r.status_code == 200, r.text
            page = r.json()
            assert page["limited"] is False
            events += page["events"]
            since = page["nextCursor"]
            if page["heldBack"]:  # a transaction (any, on this server) is still open
                await asyncio.sleep(0.05)
            elif not page["more"]:
                assert len(page["events"]) < limit
                return events, since


@contextlib.asynccontextmanager
async def sync_api(
    pool: asyncpg.Pool, options: SyncOptions | None = None
) -> AsyncIterator[tuple[Sync, httpx.AsyncClient]]:
    """The REST API with ``GET /api/sync`` under ``options``, in this process."""
    service = SyncService(pool, default_payload_builder(MEDIA), options)
    routes = sync_routes(service, TokenVerifier(SECRET))
    app = create_api(pool=pool, options=hub_settings().api_options(), routes=routes)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        yield Sync(http), http
