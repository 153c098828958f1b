"""Assemble a running dispatcher from settings: store, builders, metrics, alerts, runner.

Used by ``realtime-dispatch worker`` and by ``serve``; tests build the same pieces directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import structlog
from prometheus_client import CollectorRegistry

from realtime_dispatch.auth.media import MediaMinter, MediaOptions
from realtime_dispatch.database.connections import (
    DISPATCHER_SERVER_SETTINGS,
    close_pool,
    connect,
    create_pool,
    lock_connection_settings,
    transaction_settings_sql,
)
from realtime_dispatch.delivery.push import HubPublisher
from realtime_dispatch.dispatch.alerts import AlertSink, LogAlertSink
from realtime_dispatch.dispatch.dispatcher import POOL_SIZE, Dispatcher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.observer import DispatchObserver
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.projections.builder import PayloadBuilder
from realtime_dispatch.dispatch.projections.registry import (
    default_payload_builder,
    media_invite_kinds,
)
from realtime_dispatch.dispatch.runner import DispatchRunner
from realtime_dispatch.manifest.manifest import Manifest
from realtime_dispatch.outbox.partitions import partitions
from realtime_dispatch.outbox.store import OutboxStore
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec

_log = structlog.get_logger(__name__)


@dataclass
class DispatchService:
    runners: list[DispatchRunner]
    """One per partition (one in all unless ``REALTIME_DISPATCH_PARTITIONS`` > 1)."""
    metrics: DispatchMetrics
    pool: asyncpg.Pool
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def runner(self) -> DispatchRunner:
        """Partition 0's runner: with one partition, the only one."""
        return self.runners[0]

    @property
    def dispatcher(self) -> Dispatcher:
        return self.runners[0].dispatcher

    def request_stop(self) -> None:
        for runner in self.runners:
            runner.request_stop()

    def alive(self) -> bool:
        """Every runner's task still runs (a runner never ends by itself: one that did died)."""
        return all(not task.done() for task in self.tasks)


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
    session_dsn: str | None = None,
    pooled: bool = False,
    manifest: Manifest | None = None,
    membership_marks: bool = False,
    keys: KeyCodec = UUID_KEYS,
) -> AsyncIterator[DispatchService]:
    """Open the dispatcher's pool and run its loop in a task; stop it gracefully on exit.

    ``session_dsn`` (default ``dsn``): where each runner's own connection goes (LISTEN and the
    advisory lock need a session, which a transaction pooler does not keep). ``pooled``: ``dsn``
    goes through a transaction pooler
    (:func:`~realtime_dispatch.database.connections.create_pool`); the claim then sets the
    planner settings per transaction. ``manifest``: the projection SQL of
    the default builder (the shipped one when ``None``). ``membership_marks``: the publisher
    hands on membership marks (the hub's in-process, Redis and HTTP publishers): each runner keeps
    them, and claims on its own connection (:mod:`realtime_dispatch.delivery.marks`). ``keys``:
    the owner's key type (``REALTIME_KEY_TYPE``), how the payloads write ids."""
    lock_dsn = session_dsn or dsn
    metrics = DispatchMetrics(registry or CollectorRegistry())
    shares = partitions(options.partitions)
    pool = await create_pool(
        dsn,
        min_size=1,
        max_size=POOL_SIZE * len(shares),
        server_settings=DISPATCHER_SERVER_SETTINGS,
        stateless=True,
        pooled=pooled,
    )
    try:
        claim_settings = transaction_settings_sql(DISPATCHER_SERVER_SETTINGS) if pooled else ""
        store = OutboxStore(pool, options.backoff, claim_settings=claim_settings)
        payloads = builder or default_payload_builder(media, manifest=manifest, keys=keys)
        sink = alerts or LogAlertSink()
        observer = DispatchObserver(metrics, sink, unminted=unminted_invites(media, manifest))
        await store.forget_other_partitionings(options.partitions)
        runners = [
            DispatchRunner(
                Dispatcher(
                    store=store,
                    builder=payloads,
                    publisher=publisher,
                    options=options,
                    metrics=metrics,
                    alerts=sink,
                    partition=share,
                    observer=observer,
                ),
                connect=lambda: connect(
                    lock_dsn,
                    server_settings=lock_connection_settings(
                        options.lock_ttl, options.polling_interval
                    ),
                ),
                metrics=metrics,
                marks=membership_marks,
            )
            for share in shares
        ]
        tasks = [
            asyncio.create_task(runner.run(), name=f"realtime-dispatcher-{share}")
            for runner, share in zip(runners, shares, strict=True)
        ]
        service = DispatchService(runners, metrics, pool, tasks)
        try:
            yield service
        finally:
            service.request_stop()
            await asyncio.gather(*tasks)
    finally:
        await close_pool(pool)


def unminted_invites(media: MediaOptions | None, manifest: Manifest | None) -> frozenset[str]:
    """The invite kinds this process will deliver without a media join, said once at start
    (one log line) when there are any: no Jitsi app secret, nothing can be minted."""
    if MediaMinter(media or MediaOptions()).configured:
        return frozenset()
    kinds = media_invite_kinds(manifest)
    if kinds:
        _log.warning(
            "media_unconfigured",
            kinds=sorted(kinds),
            reason="REALTIME_MEDIA_JITSI_APP_SECRET is unset: these invites go out without media",
        )
    return kinds
