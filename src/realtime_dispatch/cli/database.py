"""The database a command talks to: ``REALTIME_DATABASE_URL``, or the embedded server in
``REALTIME_DATA_DIR`` (shared by every command on this machine, so ``stats`` sees what ``serve``
runs)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

import asyncpg

from realtime_dispatch.database import EmbeddedPostgres, default_data_dir
from realtime_dispatch.messenger.schema import migrate
from realtime_dispatch.settings import Settings


@contextlib.asynccontextmanager
async def database_url(
    settings: Settings, *, run_migrations: bool = False, only_outbox: bool = False
) -> AsyncIterator[str]:
    """The database's URL for the block. ``run_migrations``: apply the schema first, the
    outbox's alone when ``only_outbox`` or a projection manifest is set (the adopter's own
    schema: no table of the reference messenger is created)."""
    embedded: EmbeddedPostgres | None = None
    if settings.database_url is not None:
        url = settings.database_url.get_secret_value()
    else:
        data_dir = (settings.data_dir or default_data_dir()) / "postgres"
        embedded = EmbeddedPostgres(data_dir)
        print(f"realtime-dispatch: starting embedded PostgreSQL in {data_dir}", file=sys.stderr)
        url = embedded.start()
        print(f"realtime-dispatch: embedded PostgreSQL at {url}", file=sys.stderr)
    try:
        if run_migrations:
            conn = await asyncpg.connect(url)
            try:
                await migrate(conn, with_messenger=settings.reference_messenger and not only_outbox)
            finally:
                await conn.close()
        yield url
    finally:
        if embedded is not None:
            embedded.stop()
