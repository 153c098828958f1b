"""Scratch databases on a real PostgreSQL server, for the tests and the benchmarks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import asyncpg

from realtime_dispatch.messenger.schema import migrate


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (keeps host, socket dir and credentials)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextlib.asynccontextmanager
async def scratch_database(
    server_url: str, prefix: str = "rd_scratch", *, migrated: bool = False
) -> AsyncIterator[str]:
    """A new database ``<prefix>_<pid>_<random>`` on the server, empty (not the tests' migrated
    template) or with the schema migrated into it (``migrated``); dropped on exit, its
    connections cut. Yields its URL."""
    name = f"{prefix}_{os.getpid()}_{uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = with_database(server_url, name)
        if migrated:
            conn = await asyncpg.connect(url)
            try:
                await migrate(conn)
            finally:
                await conn.close()
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
