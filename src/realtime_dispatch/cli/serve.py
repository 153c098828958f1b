"""``serve`` and ``hub``: the REST API and the hub in one ASGI app under uvicorn, the
call-timeout reaper beside them, and the dispatcher pushing through the in-process publisher
(``serve``) or not at all (``hub``).

Media join tokens are minted by the dispatcher from ``REALTIME_MEDIA_*``; with no media secret
configured, development mode generates them (and a line says so), so invites carry tokens;
outside it nothing is generated, and a line at start says which features are off.

With a projection manifest set (``REALTIME_PROJECTIONS``: the adopter's own schema) nothing of
the reference messenger runs: the app is the hub's routes and ``/ops`` (and ``GET /api/sync``
when the manifest has ``member_spans``), with no REST API, demo page, call reaper or media
lifecycle jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import AsyncIterator, Callable
from uuid import uuid4

import asyncpg
import structlog
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.types import ASGIApp

from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.cli.database import database_url, session_url, transaction_pooled
from realtime_dispatch.cli.devsecrets import (
    deployment_secrets,
    dev_mode,
    require_secret_unless_dev,
    with_dev_secrets,
)
from realtime_dispatch.cli.exit_codes import EXIT_FAILURE, EXIT_OK
from realtime_dispatch.cli.projections import HUB, checked_manifest
from realtime_dispatch.cli.workers import WorkerRole, run_workers, worker_socket
from realtime_dispatch.database.connections import (
    close_pool,
    connect,
    create_pool,
    lock_connection_settings,
)
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.dispatch.service import DispatchService, dispatch_service
from realtime_dispatch.edge.gc_sweep import GarbageSweep
from realtime_dispatch.edge.http_protocol import HttpLimits
from realtime_dispatch.hub import Hub, HubOptions, hub_routes
from realtime_dispatch.hub.serving.forward import forwarding
from realtime_dispatch.hub.serving.routes import HUB_PATH
from realtime_dispatch.hub.serving.server import HubServer, guarded, uvicorn_config
from realtime_dispatch.manifest.manifest import Manifest, shipped_manifest
from realtime_dispatch.messenger.api import create_api
from realtime_dispatch.messenger.api.limits import API_BODY_RULES
from realtime_dispatch.messenger.demo import demo_routes
from realtime_dispatch.messenger.demo.routes import DEMO_BODY_RULES
from realtime_dispatch.messenger.jobs.service import media_jobs
from realtime_dispatch.ops.routes import OPS_BODY_RULES, ops_routes
from realtime_dispatch.ops.service import OpsService
from realtime_dispatch.settings import Settings
from realtime_dispatch.sync.routes import sync_routes
from realtime_dispatch.sync.service import SyncService
from realtime_dispatch.sync.store import spans_page

log = structlog.get_logger(__name__)


def hub_options(
    settings: Settings, *, redis_url: str | None = None, manifest: Manifest | None = None
) -> HubOptions:
    """The hub's options from the settings (``REALTIME_HUB_*``, the backplane's Redis URL,
    ``redis_url`` overriding it, the manifest's ``member_chats``)."""
    secret = settings.hub_jwt_secret
    key = settings.hub_service_key
    url = redis_url
    if url is None and settings.redis_url is not None:
        url = settings.redis_url.get_secret_value()
    return HubOptions(
        jwt_secret=secret.get_secret_value() if secret is not None else None,
        tokens=settings.token_options(),
        service_key=key.get_secret_value() if key is not None else None,
        backplane_url=url if settings.backplane_mode != "none" else None,
        backplane_mode=settings.backplane_mode,
        ping_interval=settings.hub_ping_interval,
        idle_timeout=settings.hub_idle_timeout,
        member_chats_sql=manifest.sql("member_chats") if manifest is not None else None,
        presence_chats_sql=(manifest or shipped_manifest()).sql("presence_chats"),
        max_connections_per_user=settings.hub_max_connections_per_user,
        max_negotiations_per_client=settings.http_max_connections_per_client,
        typing_interval=settings.hub_typing_interval,
        presence_watch_limit=settings.hub_presence_watch_limit,
        presence_grace=settings.hub_presence_grace,
        presence_blocks=manifest is None or manifest.shipped,
    )


def http_limits(settings: Settings) -> HttpLimits:
    """The HTTP server's timeouts, head cap, per-address cap and trusted proxies
    (``REALTIME_HTTP_*``)."""
    return HttpLimits(
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        max_per_client=settings.http_max_connections_per_client,
        max_header_bytes=settings.http_max_header_bytes,
        trusted_proxies=settings.trusted_proxy_networks(),
    )


@contextlib.asynccontextmanager
async def _maybe_dispatcher(
    enabled: bool,
    url: str,
    settings: Settings,
    hub: Hub,
    registry: CollectorRegistry,
    *,
    manifest: Manifest,
) -> AsyncIterator[DispatchService | None]:
    if not enabled:
        yield None
        return
    async with dispatch_service(
        url,
        settings.dispatch_options(),
        hub.publisher(),
        registry=registry,
        media=settings.media_options(),
        session_dsn=session_url(settings, url),
        pooled=transaction_pooled(settings),
        manifest=manifest,
        membership_marks=True,
        keys=settings.keys(),
    ) as service:
        yield service


@contextlib.asynccontextmanager
async def lifecycle_jobs(
    pool: asyncpg.Pool,
    on_failure: Callable[[], None],
    settings: Settings,
    *,
    url: str,
    registry: CollectorRegistry,
) -> AsyncIterator[None]:
    """The call-timeout reaper, the conference-room reaper and the recording-finalize retry; if
    one dies, it is logged and ``on_failure`` is called (the server stops and exits non-zero)
    rather than limp on without it. None with a projection manifest set (the calls,
    conferences and recordings are the adopter's)."""
    if not settings.reference_messenger:
        yield
        return
    dsn = session_url(settings, url)
    schedule = settings.job_schedule()
    lock_settings = lock_connection_settings(schedule.lock_ttl, schedule.interval)
    async with media_jobs(
        pool,
        connect=lambda: connect(dsn, server_settings=lock_settings),
        schedule=schedule,
        calls=settings.call_reaper_options(),
        conferences=settings.conference_reaper_options(),
        recordings=settings.recording_finalize_options(),
        registry=registry,
        on_failure=on_failure,
    ):
        yield


def _app(  # noqa: PLR0917 (the composition root's parts)
    settings: Settings,
    pool: asyncpg.Pool,
    sync_pool: asyncpg.Pool,
    hub: Hub,
    demo_secret: str | None,
    manifest: Manifest,
    *,
    host: str,
    port: int,
) -> Starlette:
    """The reference messenger's REST API with the hub, sync, ops and demo routes; with a
    manifest set, the hub's and ops routes, and ``GET /api/sync`` when the manifest has
    ``member_spans`` (the adopter's memberships: the reference page query reads the reference
    messenger's own)."""
    operator_routes = ops_routes(OpsService(pool), hub.verifier)
    # Sync builds its payloads with the dispatcher's own builders over the same manifest,
    # composed here: it stands beside the messenger's REST API, not inside it.
    builder = default_payload_builder(
        settings.media_options(), manifest=manifest, keys=settings.keys()
    )
    if not settings.reference_messenger:
        spans = adopter_sync_query(manifest)
        if spans is None:
            return Starlette(routes=[*hub_routes(hub), *operator_routes])
        adopter = SyncService(sync_pool, builder, settings.sync_options(), page_query=spans)
        resumes = sync_routes(adopter, hub.verifier, metrics_registry=hub.metrics_registry)
        # A FastAPI app (sync's route is FastAPI's), without the docs the reference API has.
        return FastAPI(
            routes=[*hub_routes(hub), *resumes, *operator_routes],
            openapi_url=None,
            docs_url=None,
            redoc_url=None,
        )
    resume = SyncService(sync_pool, builder, settings.sync_options())
    demo = demo_routes(pool, hub.verifier, dev_secret=demo_secret, host=host, port=port)
    return create_api(
        pool=pool,
        options=settings.api_options(),
        routes=[
            *hub_routes(hub),
            *sync_routes(resume, hub.verifier, metrics_registry=hub.metrics_registry),
            *operator_routes,
            *demo,
        ],
        verifier=hub.verifier,
        metrics_registry=hub.metrics_registry,
    )


def adopter_sync_query(manifest: Manifest) -> str | None:
    """The sync page query over the manifest's ``member_spans``; None without it (sync off)."""
    member_spans = manifest.sql("member_spans")
    return None if member_spans is None else spans_page(member_spans)


async def require_sync_composes(url: str, manifest: Manifest) -> None:
    """``member_spans`` prepared alone held its contract (``checked_manifest``); this prepares
    the page it is composed into, so that a query that cannot stand as a subquery (a data
    change, say) stops the start with one line rather than failing every page."""
    query = adopter_sync_query(manifest)
    if query is None:
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.prepare(query)
    except asyncpg.PostgresError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise manifest.problem(
            f"member_spans: does not compose into the sync page: {reason}"
        ) from None
    finally:
        await conn.close()


async def serve_workers(
    settings: Settings, command: str, count: int, *, host: str, port: int, dev: bool
) -> int:
    """``serve`` / ``hub`` with ``count`` workers (:mod:`.workers`). The parent does once what
    the workers would all do: the secrets check, development secrets, the embedded database
    and the migrations; the workers get the database's URL (and ``REALTIME_DEV``)."""
    require_secret_unless_dev(settings, dev=dev)
    env = dict(os.environ)
    if dev_mode(settings, dev=dev):
        with_dev_secrets(settings, create=True)
        env["REALTIME_DEV"] = "true"
    async with database_url(settings, run_migrations=True) as url:
        env["REALTIME_DATABASE_URL"] = url
        return await run_workers(
            command,
            count,
            host=host,
            port=port,
            dev=dev,
            env=env,
            backplane=settings.backplane_mode != "none",
            user_claim=settings.hub_jwt_user_claim,
        )


async def serve(
    settings: Settings,
    *,
    host: str,
    port: int,
    with_dispatcher: bool,
    dev: bool = False,
    worker: WorkerRole | None = None,
) -> int:
    """``serve`` / ``hub``. With ``REALTIME_DATABASE_URL`` and no ``REALTIME_HUB_JWT_SECRET``
    this refuses to start unless ``dev`` (``--dev``) or ``REALTIME_DEV`` asks for development
    mode; the embedded default is development mode. ``worker``: this process is a worker of
    ``--workers N`` (its parent ran the migrations and holds the port)."""
    require_secret_unless_dev(settings, dev=dev)
    # Demo tokens are minted only on generated development secrets, never in a deployment.
    dev_tokens = settings.hub_jwt_secret is None and settings.hub_jwt_jwks_url is None
    off: list[str] = []
    if dev_mode(settings, dev=dev):
        settings = with_dev_secrets(settings, create=True)
    else:
        off = deployment_secrets(
            settings, with_dispatcher=with_dispatcher, reference_api=settings.reference_messenger
        )
    registry = CollectorRegistry()
    reaper_failed = False
    async with database_url(settings, run_migrations=worker is None) as url:
        manifest = await checked_manifest(session_url(settings, url), settings, needs=HUB)
        if not settings.reference_messenger:
            await require_sync_composes(session_url(settings, url), manifest)
        pooled = transaction_pooled(settings)
        # No user of this pool keeps session state (the LISTENs and advisory locks have
        # sessions of their own): a release costs no reset round trip.
        pool = await create_pool(url, min_size=1, max_size=10, pooled=pooled, stateless=True)
        # Sync's own few connections: a replay of old cursors waits for these, never for the
        # ones REST, the hub's admission and the dispatcher work on.
        sync_pool = await create_pool(  # a page leaves no session state: SET LOCAL only
            url, min_size=0, max_size=settings.sync_pool_size, pooled=pooled, stateless=True
        )
        try:
            options = hub_options(settings, manifest=manifest)
            if worker is not None:
                options = dataclasses.replace(options, worker=worker.index)
            async with (
                Hub(
                    options,
                    pool=pool,
                    dsn=session_url(settings, url),
                    metrics_registry=registry,
                ) as hub,
                _maybe_dispatcher(with_dispatcher, url, settings, hub, registry, manifest=manifest),
            ):
                jwt_secret = settings.hub_jwt_secret
                demo_secret = jwt_secret.get_secret_value() if dev_tokens and jwt_secret else None
                app = _app(
                    settings, pool, sync_pool, hub, demo_secret, manifest, host=host, port=port
                )
                rules = [*API_BODY_RULES, *OPS_BODY_RULES, *DEMO_BODY_RULES]
                served: ASGIApp = guarded(app, hub, rules)
                if worker is not None:
                    directory = worker.directory
                    served = forwarding(
                        served,
                        worker.index,
                        lambda index: worker_socket(directory, index),
                        HUB_PATH,
                    )
                sweep = GarbageSweep()  # a closed connection's memory back within seconds
                config = uvicorn_config(
                    served,
                    host=host,
                    port=port,
                    log_level=settings.log_level,
                    http_limits=http_limits(settings),
                    hub=hub,
                    uds=worker.socket_path if worker is not None else None,
                    ended=sweep.ended,
                )
                server = HubServer(
                    config,
                    hub,
                    handoff=worker.channel if worker is not None else None,
                    sweep=sweep,
                )

                def stop_on_reaper_failure() -> None:
                    nonlocal reaper_failed
                    reaper_failed = True
                    server.should_exit = True

                async with lifecycle_jobs(
                    pool, stop_on_reaper_failure, settings, url=url, registry=registry
                ):
                    parts = "demo /, hub /hubs/messenger, REST /api, docs /docs, ops /ops"
                    if not settings.reference_messenger:
                        sync = "" if manifest.sql("member_spans") is None else ", sync /api/sync"
                        parts = (
                            f"hub /hubs/messenger{sync}, ops /ops, projections {manifest.source}"
                        )
                    lines = [f"realtime-dispatch: {line}" for line in off]
                    lines.append(
                        f"realtime-dispatch: listening on http://{host}:{port}"
                        f" ({parts}{', dispatcher on' if with_dispatcher else ''})"
                    )
                    if demo_secret is not None:
                        # Only on generated development secrets: with a configured secret a
                        # ready-made token would end up in production logs.
                        demo_user = uuid4()
                        token = mint_token(demo_secret, demo_user)
                        lines.append(f"realtime-dispatch: a token for user {demo_user}: {token}")
                    if worker is not None and worker.index > 0:  # worker 0 says the rest
                        lines = [f"realtime-dispatch: worker {worker.index} ready"]
                    print("\n".join(lines), file=sys.stderr, flush=True)
                    await server.serve()
                failed = hub.failed.is_set() or reaper_failed
        finally:
            await close_pool(sync_pool)
            await close_pool(pool)
    return EXIT_FAILURE if failed else EXIT_OK
