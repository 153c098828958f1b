"""The projection manifest at start-up: :func:`checked_manifest` is what ``worker``, ``hub``
and ``serve`` call before their first claim or connection, and ``realtime-dispatch check``
prints the same verdicts, one line per query."""

from __future__ import annotations

import sys
from collections.abc import Collection

import asyncpg

from realtime_dispatch.cli.database import database_url
from realtime_dispatch.cli.exit_codes import EXIT_OK, EXIT_USAGE
from realtime_dispatch.manifest.check import check_manifest, require_valid
from realtime_dispatch.manifest.manifest import VARIABLE, Manifest
from realtime_dispatch.settings import Settings

HUB = ("hub",)
"""What a process serving the hub needs of the manifest: ``member_chats``."""


async def checked_manifest(url: str, settings: Settings, *, needs: Collection[str]) -> Manifest:
    """The settings' manifest, every query prepared against ``url``'s database and compared
    with the contract; a mismatch raises the one-line ConfigurationError (exit 2)."""
    manifest = settings.projection_manifest()
    conn = await asyncpg.connect(url)
    try:
        await require_valid(conn, manifest, needs=needs, keys=settings.keys())
    finally:
        await conn.close()
    return manifest


async def check(settings: Settings) -> int:
    """``realtime-dispatch check``: one line per query of the contract on stdout (the manifest's
    file on stderr); 0 when all hold, 2 otherwise."""
    manifest = settings.projection_manifest()
    async with database_url(settings) as url:
        conn = await asyncpg.connect(url)
        try:
            results = await check_manifest(conn, manifest, needs=HUB, keys=settings.keys())
        finally:
            await conn.close()
    print(f"realtime-dispatch: checking {VARIABLE}: {manifest.source}", file=sys.stderr)
    for result in results:
        print(result.line())
    return EXIT_OK if all(r.ok for r in results) else EXIT_USAGE
