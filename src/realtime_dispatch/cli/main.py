"""``realtime-dispatch``: the one command for operators and developers.

Every subcommand reads the same ``REALTIME_*`` environment. Invalid settings or arguments stop
the process with exit code 2 and one line naming the variable; SIGTERM/SIGINT stop gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from uuid import UUID

import orjson
import structlog

from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.cli import ops, projections
from realtime_dispatch.cli.database import (
    apply_migrations,
    database_url,
    require_database,
    require_database_url,
    require_reference_keys,
    session_url,
    transaction_pooled,
)
from realtime_dispatch.cli.devsecrets import dev_mode, with_dev_secrets
from realtime_dispatch.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from realtime_dispatch.cli.serve import serve, serve_workers
from realtime_dispatch.cli.worker_http import probe_server
from realtime_dispatch.cli.workers import worker_role
from realtime_dispatch.database.connections import create_pool
from realtime_dispatch.delivery.push import HubPublisher
from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher
from realtime_dispatch.dispatch.service import dispatch_service
from realtime_dispatch.errors import ConfigurationError, DatabaseUnavailable, SchemaConflict
from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher
from realtime_dispatch.hub.backplane.sharded_publisher import ShardedRedisHubPublisher
from realtime_dispatch.manifest.kinds import KIND_NAME, MAX_KIND
from realtime_dispatch.messenger.schema import selected_migrations
from realtime_dispatch.outbox.migrate import migration_script
from realtime_dispatch.outbox.store import OutboxStore
from realtime_dispatch.settings import Settings, load_settings, parse_workers
from realtime_dispatch.telemetry.logs import configure_logging
from realtime_dispatch.telemetry.tracing import configure_tracing

_log = structlog.get_logger(__name__)


class UsageError(Exception):
    """Bad command-line arguments (exit 2)."""


def _kind_name(value: str) -> str:
    """``--kind``: a kind's name, built in or declared (PascalCase, at most 32 characters)."""
    if not KIND_NAME.fullmatch(value) or len(value) > MAX_KIND:
        raise argparse.ArgumentTypeError(f"{value!r} is not a kind name")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="realtime-dispatch",
        description="Transactional-outbox realtime push: outbox, dispatcher, SignalR hub.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    migrate = sub.add_parser(
        "migrate", help="apply the schema (idempotent, safe to run concurrently)"
    )
    migrate.add_argument(
        "--only",
        choices=["outbox"],
        help="the outbox's schema alone (its table, functions, trigger, migration records)",
    )
    migrate.add_argument(
        "--print-sql", action="store_true", help="print the SQL instead of applying it"
    )
    sub.add_parser("check", help="check the projection manifest against the database")
    kinds = sub.add_parser("kinds", help="the kinds the manifest declares (the app's own)")
    kinds.add_argument(
        "--typescript",
        action="store_true",
        help="print TypeScript types of their payloads, from the queries' columns",
    )
    for name, text in (
        ("serve", "hub + REST + dispatcher in one process (embedded PostgreSQL by default)"),
        ("hub", "hub + REST without the dispatcher"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=8000)
        p.add_argument(
            "--dev",
            action="store_true",
            help="development secrets with REALTIME_DATABASE_URL when no JWT secret is set",
        )
        p.add_argument(
            "--workers",
            default=None,
            metavar="N",
            help="hub processes sharing the port: a number or auto (REALTIME_HUB_WORKERS)",
        )
    worker = sub.add_parser(
        "worker", help="the dispatcher alone, pushing to REALTIME_HUB_URL or Redis"
    )
    worker.add_argument("--host", default=None, help="probes' address (REALTIME_WORKER_HOST)")
    worker.add_argument(
        "--port",
        type=int,
        default=None,
        help="serve /metrics /healthz /readyz (REALTIME_WORKER_PORT)",
    )
    requeue = sub.add_parser("requeue", help="Quarantined -> Pending with attempts 0")
    selector = requeue.add_mutually_exclusive_group(required=True)
    selector.add_argument("--id", dest="ids", action="append", type=UUID, metavar="ID")
    selector.add_argument("--kind", type=_kind_name, help="a built-in or declared kind")
    selector.add_argument("--all", action="store_true")
    stats = sub.add_parser("stats", help="pending / quarantined / done / oldest pending age")
    stats.add_argument("--json", action="store_true")
    stats.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    quarantined = sub.add_parser("quarantined", help="list quarantined rows with their errors")
    quarantined.add_argument("--kind", type=_kind_name, help="a built-in or declared kind")
    quarantined.add_argument("--limit", type=int, default=100)
    quarantined.add_argument("--json", action="store_true")
    lock = sub.add_parser("lock", help="who holds the dispatcher's single-runner lock")
    lock.add_argument("--json", action="store_true")
    token = sub.add_parser("token", help="print a hub/REST JWT signed with REALTIME_HUB_JWT_SECRET")
    token.add_argument(
        "--user", required=True, metavar="KEY", help="the user's key (REALTIME_KEY_TYPE)"
    )
    token.add_argument("--ttl", type=float, default=3600.0)
    token.add_argument("--admin", action="store_true", help="add the admin role claim")
    revoke = sub.add_parser(
        "revoke", help="cut a user off: refuse their earlier tokens, close their connections"
    )
    action = revoke.add_mutually_exclusive_group(required=True)
    action.add_argument("--user", metavar="KEY", help="revoke this user's tokens")
    action.add_argument("--lift", metavar="KEY", help="lift this user's revocation")
    action.add_argument("--list", action="store_true", help="list the revocations in force")
    revoke.add_argument("--json", action="store_true")
    return parser


async def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Apply the schema; one line per migration applied, then what was done."""
    settings.projection_manifest()  # a manifest that does not parse stops before any change
    async with database_url(settings) as url:
        applied = await apply_migrations(settings, url, only_outbox=args.only == "outbox")
        await projections.register_on_migrate(session_url(settings, url), settings)
    for migration in applied:
        print(f"applied {migration.version:04d}_{migration.name}")
    if applied:
        print(f"applied {len(applied)} migration{'s' if len(applied) > 1 else ''}")
    else:
        print("schema is up to date")
    return EXIT_OK


def _print_sql(settings: Settings, args: argparse.Namespace) -> int:
    """``migrate --print-sql``: the schema ``migrate`` would apply, without a database."""
    with_messenger = settings.reference_messenger and args.only != "outbox"
    require_reference_keys(settings, with_messenger=with_messenger)
    migrations = selected_migrations(with_messenger=with_messenger, keys=settings.keys())
    print(migration_script(migrations), end="")
    return EXIT_OK


async def _check(settings: Settings, _: argparse.Namespace) -> int:
    return await projections.check(settings)


async def _kinds(settings: Settings, args: argparse.Namespace) -> int:
    return await projections.kinds(settings, typescript=args.typescript)


async def _stats(settings: Settings, args: argparse.Namespace) -> int:
    if args.watch:
        return await _cancel_on_signal(ops.watch_stats(settings))
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1, pooled=transaction_pooled(settings))
        try:
            stats = await OutboxStore(pool, settings.dispatch_options().backoff).stats()
        finally:
            await pool.close()
    if args.json:
        print(orjson.dumps(stats.as_json()).decode())
    else:
        for key, value in stats.as_json().items():
            print(f"{key:>24}: {value}")
    return EXIT_OK


async def _requeue(settings: Settings, args: argparse.Namespace) -> int:
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1, pooled=transaction_pooled(settings))
        try:
            count = await OutboxStore(pool, settings.dispatch_options().backoff).requeue(
                ids=args.ids or (),
                kind=args.kind,
                everything=bool(args.all),
            )
        finally:
            await pool.close()
    print(f"requeued {count}")
    return EXIT_OK


def _token(settings: Settings, args: argparse.Namespace) -> int:
    if dev_mode(settings):
        settings = with_dev_secrets(settings, create=False)
    if settings.hub_jwt_secret is None:
        raise ConfigurationError("REALTIME_HUB_JWT_SECRET", "required to sign a token")
    if not math.isfinite(args.ttl) or args.ttl <= 0:
        raise UsageError("--ttl must be a finite number > 0")
    secret = settings.hub_jwt_secret.get_secret_value()
    user = ops.user_key(settings, args.user)
    if user is None:
        raise UsageError(f"--user must be a key of REALTIME_KEY_TYPE={settings.key_type}")
    print(
        mint_token(
            secret,
            user,
            ttl=args.ttl,
            admin=args.admin,
            issuer=settings.hub_jwt_issuer,
            audience=settings.hub_jwt_audience,
            user_claim=settings.hub_jwt_user_claim,
        )
    )
    return EXIT_OK


def worker_publisher(settings: Settings, dsn: str | None = None) -> HubPublisher:
    """The backplane's publisher when one is configured, else HTTP to ``REALTIME_HUB_URL``."""
    mode = settings.backplane_mode
    if mode != "none":
        assert settings.redis_url is not None
        url = settings.redis_url.get_secret_value()
        if mode == "redis-cluster":
            if dsn is None:
                raise ValueError("the interest-routed publisher needs the database URL")
            return ShardedRedisHubPublisher(url, dsn=dsn)
        return RedisHubPublisher(url)
    if not settings.hub_url:
        raise ConfigurationError(
            "REALTIME_HUB_URL", "required by worker (or set REALTIME_BACKPLANE_ENABLED=true)"
        )
    if settings.hub_service_key is None:
        raise ConfigurationError("REALTIME_HUB_SERVICE_KEY", "required with REALTIME_HUB_URL")
    return HttpHubPublisher(settings.hub_url, settings.hub_service_key.get_secret_value())


async def _worker(settings: Settings, args: argparse.Namespace) -> int:
    require_database_url(settings, "worker")
    # Made before the database (so a missing hub URL fails fast), except the interest-routed
    # publisher, which listens on the database itself.
    publisher = None if settings.backplane_mode == "redis-cluster" else worker_publisher(settings)
    try:
        async with database_url(settings, run_migrations=True) as url:
            session = session_url(settings, url)
            manifest = await projections.checked_manifest(session, settings, needs=())
            if publisher is None:
                publisher = worker_publisher(settings, dsn=session)
            async with (
                dispatch_service(
                    url,
                    settings.dispatch_options(),
                    publisher,
                    media=settings.media_options(),
                    session_dsn=session,
                    pooled=transaction_pooled(settings),
                    manifest=manifest,
                    membership_marks=isinstance(publisher, (RedisHubPublisher, HttpHubPublisher)),
                    keys=settings.keys(),
                ) as service,
                probe_server(
                    service,
                    host=args.host or settings.worker_host,
                    port=args.port if args.port is not None else settings.worker_port,
                    log_level=settings.log_level,
                ),
            ):
                await _until_signal(service.request_stop)
    finally:
        if publisher is not None:
            await publisher.aclose()
    return EXIT_OK


async def _cancel_on_signal(work: Coroutine[Any, Any, int]) -> int:
    """Run ``work`` until it ends or SIGTERM/SIGINT cancels it."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await task
    except asyncio.CancelledError:
        return EXIT_OK
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _until_signal(on_stop: Callable[[], None]) -> None:
    """Wait for SIGTERM/SIGINT, then call ``on_stop``."""
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
        _log.info("stop_requested")
        on_stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _worker_count(settings: Settings, args: argparse.Namespace) -> int:
    if args.workers is None:
        return settings.worker_count()
    try:
        return parse_workers(args.workers)
    except ValueError as exc:
        raise UsageError(f"--workers: {exc}") from None


async def _serve(settings: Settings, args: argparse.Namespace) -> int:
    count = _worker_count(settings, args)
    require_database(settings)  # before development secrets are written for nothing
    role = worker_role(os.environ)
    if role is None and count > 1:
        return await serve_workers(
            settings, "serve", count, host=args.host, port=args.port, dev=args.dev
        )
    return await serve(
        settings,
        host=args.host,
        port=args.port,
        with_dispatcher=role is None or role.index == 0,
        dev=args.dev,
        worker=role,
    )


async def _hub(settings: Settings, args: argparse.Namespace) -> int:
    count = _worker_count(settings, args)
    require_database_url(settings, "hub")
    role = worker_role(os.environ)
    if role is None and count > 1:
        return await serve_workers(
            settings, "hub", count, host=args.host, port=args.port, dev=args.dev
        )
    return await serve(
        settings, host=args.host, port=args.port, with_dispatcher=False, dev=args.dev, worker=role
    )


_ASYNC: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "migrate": _migrate,
    "check": _check,
    "kinds": _kinds,
    "stats": _stats,
    "requeue": _requeue,
    "worker": _worker,
    "serve": _serve,
    "hub": _hub,
    "quarantined": ops.quarantined,
    "lock": ops.lock,
    "revoke": ops.revoke,
}


GC_THRESHOLDS = (20_000, 20, 20)
SERVERS = frozenset({"serve", "hub", "worker"})


def tune_gc() -> None:
    """Fewer cyclic-GC passes for a long-running server. What exists after the imports lives as
    long as the process: :func:`gc.freeze` takes it out of every later collection. A young
    generation of 20,000 objects instead of 700 makes collections rarer; objects freed by
    reference counting (almost all) are unaffected. Measured in ``serve`` at 10,000 deliveries/s:
    GC time 0.71 → 0.16 s per 23 s, and no more full collections (90 ms each, every few
    seconds, with the event loop stopped)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run_event_loop(work: Coroutine[Any, Any, int]) -> int:
    """Run ``work`` on uvloop where it is installed (it is a dependency on Linux and macOS): the
    hub's WebSocket writes and the dispatcher's round trips cost markedly less CPU on it
    (docs/BENCHMARKS.md, "End to end"); plain asyncio elsewhere."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)


_FAILURES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str, int], ...] = (
    (ConfigurationError, "invalid setting {exc}", EXIT_USAGE),
    (UsageError, "{exc}", EXIT_USAGE),
    (SchemaConflict, "schema conflict: {exc}", EXIT_USAGE),
    (DatabaseUnavailable, "database unavailable ({exc})", EXIT_FAILURE),
    ((OSError, ConnectionError), "{name}: {exc}", EXIT_FAILURE),
)
"""How a command's failure is told on stderr, the first that matches: (the error, the line
after ``realtime-dispatch:``, the exit code); any other error is raised."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    flush_traces: Callable[[], None] | None = None
    try:
        settings = load_settings()
        configure_logging(settings.log_level)
        if args.command == "token":
            return _token(settings, args)
        if args.command == "migrate" and args.print_sql:
            return _print_sql(settings, args)
        flush_traces = configure_tracing(os.environ, f"realtime-dispatch-{args.command}")
        if args.command in SERVERS:
            tune_gc()
        return run_event_loop(_ASYNC[args.command](settings, args))
    except Exception as exc:
        for error, line, code in _FAILURES:
            if isinstance(exc, error):
                print(
                    f"realtime-dispatch: {line.format(exc=exc, name=type(exc).__name__)}",
                    file=sys.stderr,
                )
                return code
        raise
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if flush_traces is not None:
            flush_traces()


if __name__ == "__main__":
    sys.exit(main())
