"""Fixtures of the integration tests: the REST API in this process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest


@pytest.fixture
def open_api(pool: asyncpg.Pool) -> Callable[..., contextlib.AbstractAsyncContextManager[Any]]:
    """``open_api(**settings)``: an async context manager yielding an ``Api`` client of the REST
    API served in this process (``httpx.ASGITransport``) on ``hub_settings(**settings)``."""
    from realtime_dispatch.messenger.api import create_api
    from tests.hub_fixtures import hub_settings
    from tests.integration.messenger_scenario import Api

    @contextlib.asynccontextmanager
    async def open_(**settings: Any) -> AsyncIterator[Api]:
        app = create_api(pool=pool, options=hub_settings(**settings).api_options())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield Api(http)

    return open_


@pytest.fixture
async def api(request: pytest.FixtureRequest, open_api: Callable[..., Any]) -> AsyncIterator[Any]:
    """The REST API on the settings the test's module names in ``API_SETTINGS`` (by default
    none: ``hub_settings()``)."""
    async with open_api(**getattr(request.module, "API_SETTINGS", {})) as client:
        yield client
