"""Assemble a running dispatcher from settings: store, builders, metrics, alerts, runner.

Used by ``realtime-dispatch worker`` and by ``serve``; tests build the same pieces directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
from prometheus_client import CollectorRegistry

from realtime_dispatch.contracts.builder import PayloadBuilder
from realtime_dispatch.contracts.registry import default_payload_builder
from realtime_dispatch.database import (
    DISPATCHER_SERVER_SETTINGS,
    connect,
    create_pool,
    lock_connection_settings,
)
from realtime_dispatch.dispatch.alerts import AlertSink, LogAlertSink
from realtime_dispatch.dispatch.dispatcher import Dispatcher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.publisher import HubPublisher
from realtime_dispatch.dispatch.runner import DispatchRunner
from realtime_dispatch.outbox.store import OutboxStore
from realtime_dispatch.settings import MediaOptions, RealtimeDispatchOptions


@dataclass
class DispatchService:
    runner: DispatchRunner
    dispatcher: Dispatcher
    metrics: DispatchMetrics
    pool: asyncpg.Pool


@contextlib.asynccontextmanager
async def dispatch_service(
    dsn: str,
    options: RealtimeDispatchOptions,
    publisher: HubPublisher,
    *,
    registry: CollectorRegistry | None = None,
    builder: PayloadBuilder | None = None,
    alerts: AlertSink | None = None,
    media: MediaOptions | None = None,
) -> AsyncIterator[DispatchService]:
    """Open the dispatcher's pool and run its loop in a task; stop it gracefully on exit."""
    metrics = DispatchMetrics(registry or CollectorRegistry())
    pool = await create_pool(
        dsn, min_size=1, max_size=4, server_settings=DISPATCHER_SERVER_SETTINGS, stateless=True
    )
    try:
        dispatcher = Dispatcher(
            store=OutboxStore(pool, options),
            builder=builder or default_payload_builder(media),
            publisher=publisher,
            options=options,
            metrics=metrics,
            alerts=alerts or LogAlertSink(),
        )
        runner = DispatchRunner(
            dispatcher,
            connect=lambda: connect(
                dsn,
                server_settings=lock_connection_settings(
                    options.lock_ttl, options.polling_interval
                ),
            ),
            metrics=metrics,
        )
        task = asyncio.create_task(runner.run(), name="realtime-dispatcher")
        try:
            yield DispatchService(runner, dispatcher, metrics, pool)
        finally:
            runner.request_stop()
            await task
    finally:
        await pool.close()
