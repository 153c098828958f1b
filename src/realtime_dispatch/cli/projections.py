"""The projection manifest at start-up: :func:`checked_manifest` is what ``worker``, ``hub``
and ``serve`` call before their first claim or connection, and ``realtime-dispatch check``
prints the same verdicts, one line per query."""

from __future__ import annotations

import sys
from collections.abc import Collection

import asyncpg

from realtime_dispatch.cli.database import database_url
from realtime_dispatch.cli.exit_codes import EXIT_OK, EXIT_USAGE
from realtime_dispatch.manifest.check import (
    check_kind,
    check_manifest,
    kind_columns,
    require_valid,
)
from realtime_dispatch.manifest.kinds import typescript_module
from realtime_dispatch.manifest.manifest import VARIABLE, Manifest
from realtime_dispatch.manifest.registry import register_kinds, registry_exists
from realtime_dispatch.settings import Settings

HUB = ("hub",)
"""What a process serving the hub needs of the manifest: ``member_chats``."""


async def checked_manifest(url: str, settings: Settings, *, needs: Collection[str]) -> Manifest:
    """The settings' manifest, every query prepared against ``url``'s database and compared
    with the contract; a mismatch raises the one-line ConfigurationError (exit 2). Then the
    built-in and declared kinds are registered (the outbox accepts their rows from now on)."""
    manifest = settings.projection_manifest()
    conn = await asyncpg.connect(url)
    try:
        await require_valid(conn, manifest, needs=needs, keys=settings.keys())
        await register_kinds(conn, manifest)
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
            registered = await _register_if_valid(conn, manifest, all(r.ok for r in results))
        finally:
            await conn.close()
    print(f"realtime-dispatch: checking {VARIABLE}: {manifest.source}", file=sys.stderr)
    for result in results:
        print(result.line())
    if registered is not None:
        print(registered, file=sys.stderr)
    return EXIT_OK if all(r.ok for r in results) else EXIT_USAGE


async def _register_if_valid(conn: asyncpg.Connection, manifest: Manifest, ok: bool) -> str | None:
    """``check``'s registration of the kinds when every line held: a line saying so, or
    ``None`` when there is no outbox registry yet and the manifest declares no kind."""
    if not ok:
        return None
    if not await registry_exists(conn):
        return "kinds: not registered (no outbox yet: 'realtime-dispatch migrate' registers them)"
    added = await register_kinds(conn, manifest)
    declared = ", ".join(kind.name for kind in manifest.kinds) or "none declared"
    return f"kinds: registered ({declared}; {len(added)} added or changed)"


async def kinds(settings: Settings, *, typescript: bool) -> int:
    """``realtime-dispatch kinds``: the declared kinds, one line each (name, target, event,
    query or ids); with ``--typescript`` a TypeScript module of their payloads, typed from the
    queries' columns (each prepared against the database, never run). A kind whose query does
    not hold stops it with the one-line error (exit 2)."""
    manifest = settings.projection_manifest()
    keys = settings.keys()
    if not typescript:
        for kind in manifest.kinds:
            source = "ids" if kind.ids_only else "query"
            print(f"{kind.name}\t{kind.target}\t{kind.event}\t{source}")
        return EXIT_OK
    columns: dict[str, list[tuple[str, str]]] = {}
    async with database_url(settings) as url:
        conn = await asyncpg.connect(url)
        try:
            for kind in manifest.kinds:
                verdict = await check_kind(conn, kind, keys)
                if not verdict.ok:
                    raise manifest.problem(verdict.line())
                if not kind.ids_only:
                    columns[kind.name] = (await kind_columns(conn, kind))[1]
        finally:
            await conn.close()
    print(typescript_module(manifest.kinds, columns, keys, source=manifest.source), end="")
    return EXIT_OK


async def register_on_migrate(url: str, settings: Settings) -> list[str]:
    """``migrate``: register the built-in and declared kinds once the schema is there."""
    manifest = settings.projection_manifest()
    conn = await asyncpg.connect(url)
    try:
        return await register_kinds(conn, manifest)
    finally:
        await conn.close()
