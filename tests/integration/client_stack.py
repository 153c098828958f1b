"""The messenger as ``serve`` assembles it, in this event loop, for SDK tests: REST + hub under
uvicorn on a free port, and the real dispatcher, which a test can stop and start again (a
dispatcher that is down between an owner's commit and the push)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from uuid import UUID, uuid4

import asyncpg
import httpx

from realtime_dispatch.client import MessengerClient
from realtime_dispatch.client.client import ClientOptions
from realtime_dispatch.client.connection import ConnectionOptions
from realtime_dispatch.delivery.push import HubPublisher
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.dispatch.service import dispatch_service
from realtime_dispatch.hub import Hub, hub_routes
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.serving.server import HubServer, uvicorn_config
from realtime_dispatch.messenger.api import create_api
from realtime_dispatch.settings import Settings
from realtime_dispatch.sync.routes import sync_routes
from realtime_dispatch.sync.service import SyncService
from support.hub_wire import make_token
from support.procs import free_port
from tests.hub_fixtures import hub_settings

FAST = RealtimeDispatchOptions(
    polling_interval=0.1, backoff_base=0.05, backoff_cap=0.2, max_run_duration=2, lock_ttl=10
)
QUICK_CLIENT = ClientOptions(
    connection=ConnectionOptions(reconnect_base=0.05, reconnect_cap=0.5), resync_retry_cap=0.5
)


@dataclass
class Stack:
    hub: Hub
    url: str
    dsn: str
    alice: UUID = field(default_factory=uuid4)
    bob: UUID = field(default_factory=uuid4)
    _dispatcher: contextlib.AsyncExitStack | None = None

    def client(self, user: UUID) -> MessengerClient:
        return MessengerClient(self.url, make_token(user), options=QUICK_CLIENT)

    def http(self, user: UUID) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {make_token(user)}"}
        )

    async def start_dispatcher(self, publisher: HubPublisher | None = None) -> None:
        """The real dispatcher, pushing to this hub (or to ``publisher``)."""
        assert self._dispatcher is None
        stack = contextlib.AsyncExitStack()
        publisher = publisher if publisher is not None else self.hub.publisher()
        await stack.enter_async_context(dispatch_service(self.dsn, FAST, publisher))
        self._dispatcher = stack

    async def stop_dispatcher(self) -> None:
        if self._dispatcher is not None:
            await self._dispatcher.aclose()
            self._dispatcher = None


@contextlib.asynccontextmanager
async def messenger_stack(
    database_url: str,
    pool: asyncpg.Pool,
    *,
    dispatcher: bool = True,
    settings: Settings | None = None,
) -> AsyncIterator[Stack]:
    settings = settings if settings is not None else hub_settings()
    async with Hub(settings.hub_options(), pool=pool, dsn=database_url) as hub:
        builder = default_payload_builder(settings.media_options())
        resume = SyncService(pool, builder, settings.sync_options())
        routes = [*hub_routes(hub), *sync_routes(resume, hub.verifier)]
        app = create_api(pool=pool, options=settings.api_options(), routes=routes)
        port = free_port()
        server = HubServer(
            uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning", hub=hub),
            hub,
            install_signal_handlers=False,
        )
        task = asyncio.create_task(server.serve(), name="client-stack-server")
        stack = Stack(hub, f"http://127.0.0.1:{port}", database_url)
        try:
            async with asyncio.timeout(10):
                while not server.started:
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.01)
            await hub.wait_ready()
            if dispatcher:
                await stack.start_dispatcher()
            yield stack
        finally:
            await stack.stop_dispatcher()
            server.should_exit = True
            await task


def drop_everyone(hub: Hub) -> None:
    """Every connection closed from the server side, reconnect allowed (a lost socket)."""
    for connection in list(hub.connections.values()):
        connection.close(CloseRequest(CloseReason.TRANSPORT_LOST, "dropped by the test", True))
