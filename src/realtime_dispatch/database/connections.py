"""PostgreSQL connections: pools and dedicated connections with the dispatcher's session
settings, and how the driver's errors are classified. (The embedded server used when no
database URL is configured is :mod:`realtime_dispatch.cli.embedded_postgres`.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeAlias

import asyncpg
import structlog
from asyncpg.pool import PoolConnectionProxy

from realtime_dispatch.errors import DatabaseUnavailable

_log = structlog.get_logger(__name__)

# A plain connection or one borrowed from a pool: the queries run the same on both.
DbConnection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"

# The dispatcher's statements are prepared; a generic plan built while the table was small can
# re-run the locking subquery per row (claims went from 56 ms to 650 ms). Custom plans avoid it.
# Its status writes need no synchronous commit: a write lost in a server crash only means the
# row is pushed again, which clients dedupe (at-least-once).
# The claim must walk ix_rto_pending_id in id order and stop at the batch size. With statistics
# that lag behind the table (taken while it was nearly empty, autovacuum behind or off) the
# planner prefers a bitmap scan of ix_rto_due plus a sort: a bitmap scan never marks the index
# entries of dead row versions, so every claim re-reads all of them (3 ms and 235 heap pages per
# claim after 20 s at 500 rows/s, growing; the ordered scan: 0.2 ms, 25 pages). No statement of
# the dispatcher needs a bitmap scan or has a better plan than a sort-free one. JIT is off: a
# disabled plan node's cost (1e10) passes every JIT threshold, and compiling took 234 ms of a
# 264 ms claim; none of these short statements gains from it anyway.
DISPATCHER_SERVER_SETTINGS: Mapping[str, str] = {
    "plan_cache_mode": "force_custom_plan",
    "enable_bitmapscan": "off",
    "enable_sort": "off",
    "jit": "off",
    "synchronous_commit": "off",
    "application_name": "realtime-dispatch",
}


def lock_connection_settings(
    lock_ttl: float, polling_interval: float | None = None
) -> dict[str, str]:
    """TCP keepalives so that the server drops a vanished runner (and its advisory lock)
    within about ``lock_ttl`` seconds.

    With ``polling_interval`` well below ``lock_ttl``, also ``idle_session_timeout``: a live
    runner queries its lock connection at least every polling interval, and a pass leaves it
    idle for less than ``lock_ttl``; a session idle longer belongs to a runner whose event loop
    is stuck, and the server ends it (and its lock) where no timer in that process could."""
    idle = max(1, int(lock_ttl / 3))
    settings = {
        **DISPATCHER_SERVER_SETTINGS,
        "application_name": "realtime-dispatch-lock",
        "tcp_keepalives_idle": str(idle),
        "tcp_keepalives_interval": str(max(1, idle // 3)),
        "tcp_keepalives_count": "3",
    }
    if polling_interval is not None and polling_interval * 2 <= lock_ttl:
        settings["idle_session_timeout"] = str(int(lock_ttl * 1000))
    return settings


async def rollback_only_reset(conn: Any) -> None:
    """A pool reset for connections that never leave session state behind (no LISTEN, session
    advisory locks, SET or temporary tables): only an interrupted transaction needs undoing.
    asyncpg's default reset costs one round trip on every release."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


# What a transaction pooler (PgBouncer, pool_mode = transaction) passes on as a startup parameter;
# it refuses a connection that sends any other (unless listed in its ignore_startup_parameters).
POOLER_STARTUP_PARAMETERS = frozenset({"application_name"})


def transaction_settings_sql(settings: Mapping[str, str]) -> str:
    """``SET LOCAL`` for each of ``settings`` but the startup-only ones, as one simple-protocol
    batch (one round trip): how session settings reach a statement behind a transaction
    pooler, where a session is not ours beyond the transaction."""
    return "; ".join(
        f"SET LOCAL {name} = '{value}'"
        for name, value in settings.items()
        if name not in POOLER_STARTUP_PARAMETERS
    )


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    server_settings: Mapping[str, str] | None = None,
    stateless: bool = False,
    pooled: bool = False,
) -> asyncpg.Pool:
    """A pool; ``stateless`` when its users never keep session state (see
    :func:`rollback_only_reset`). ``pooled``: ``dsn`` goes through a transaction pooler, so
    only :data:`POOLER_STARTUP_PARAMETERS` are sent at connect and no statement is prepared by
    name (a named statement lives on one server session; the next transaction may get
    another): the caller applies the rest per transaction (:func:`transaction_settings_sql`)."""
    settings = dict(server_settings or {})
    extra: dict[str, Any] = {}
    if pooled:
        settings = {k: v for k, v in settings.items() if k in POOLER_STARTUP_PARAMETERS}
        extra["statement_cache_size"] = 0
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings=settings,
        command_timeout=60,
        reset=rollback_only_reset if stateless else None,
        **extra,
    )
    assert pool is not None
    return pool


CONNECT_TIMEOUT = 10.0
"""Seconds a dedicated connection may take to open: a server that accepts and then says nothing
(a blackholed route, a stalled proxy) must not hold a runner for asyncpg's default minute."""


async def connect(dsn: str, *, server_settings: Mapping[str, str] | None = None) -> Any:
    """A dedicated connection outside any pool (LISTEN, advisory locks)."""
    return await asyncpg.connect(
        dsn, server_settings=dict(server_settings or {}), timeout=CONNECT_TIMEOUT
    )


POOL_CLOSE_TIMEOUT = 5.0
"""Seconds a pool may take to close on the way out: a connection still held by a stuck query (a
request, a membership load) must not keep a stopped process alive until its orchestrator kills
it."""


async def close_pool(pool: asyncpg.Pool, within: float = POOL_CLOSE_TIMEOUT) -> None:
    """Close ``pool`` gracefully (each connection once released); after ``within`` seconds,
    terminate the connections still held, with a log line saying so."""
    try:
        await asyncio.wait_for(pool.close(), within)
    except TimeoutError:
        _log.warning("pool_close_timeout", seconds=within, action="connections terminated")
        pool.terminate()


async def close_quietly(conn: Any, within: float = 2.0) -> None:
    """Close a dedicated connection (a LISTEN session, say); terminate it if closing fails or
    takes longer than ``within`` seconds. Never raises for a connection already gone."""
    if conn is None or conn.is_closed():
        return
    try:
        await asyncio.wait_for(conn.close(), within)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        conn.terminate()


# The database's errors, in one place -----------------------------------------------------------

# What a query can raise when the server, the connection or the driver fails (InternalClientError:
# what asyncpg raises for a query on a connection the server just killed). Code that must survive
# a database outage catches these.
DB_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    TimeoutError,
)

# SQLSTATE classes that mean "the server or the connection went away": 08 connection exception,
# 57 operator intervention (admin shutdown, cannot connect now), 53 insufficient resources.
_UNAVAILABLE_CLASSES = ("08", "57", "53")


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means PostgreSQL cannot be reached right now (retry later): a
    :class:`~realtime_dispatch.errors.DatabaseUnavailable` already translated, a connection-class
    SQLSTATE, or a transport failure."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        return True  # no host of a multi-host URL is a primary right now (a failover)
    if isinstance(exc, asyncpg.PostgresError):
        return str(exc.sqlstate or "")[:2] in _UNAVAILABLE_CLASSES
    return isinstance(exc, OSError | asyncpg.InterfaceError | TimeoutError)


@contextlib.asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    """Turn "database unreachable" driver errors into :class:`DatabaseUnavailable`; any other
    error goes through unchanged."""
    try:
        yield
    except DB_ERRORS as exc:
        if is_unavailable(exc):
            raise DatabaseUnavailable(f"{type(exc).__name__}") from exc
        raise
