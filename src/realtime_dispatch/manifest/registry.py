"""Registering kinds in the database (``messenger.realtime_kinds``): the outbox's trigger
accepts a row only of a registered kind, in the writer's transaction.

:func:`register_kinds` writes the built-in kinds (from the catalogue) and the manifest's
declared ones; ``migrate``, ``check``, ``worker``, ``hub`` and ``serve`` call it when they start.
Nothing is ever unregistered here: a kind taken out of the manifest stays accepted (an app
instance still running its earlier version may write it) and the dispatcher, whose manifest no
longer declares it, quarantines its rows ``KindUndeclared``. An operator drops a kind for good
with ``DELETE FROM messenger.realtime_kinds WHERE kind = '…'`` (docs/adopting.md).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from realtime_dispatch.manifest.manifest import Manifest
from realtime_dispatch.values.catalogue import CATALOGUE

REGISTRY = "messenger.realtime_kinds"

_REGISTER_SQL = """
INSERT INTO messenger.realtime_kinds AS k (kind, target_kind, event, builtin)
SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::bool[])
ON CONFLICT (kind) DO UPDATE
SET target_kind = EXCLUDED.target_kind, event = EXCLUDED.event, builtin = EXCLUDED.builtin,
    declared_at = now()
WHERE (k.target_kind, k.event, k.builtin)
      IS DISTINCT FROM (EXCLUDED.target_kind, EXCLUDED.event, EXCLUDED.builtin)
RETURNING kind
"""


def registrations(manifest: Manifest) -> list[tuple[str, str | None, str, bool]]:
    """(kind, target_kind, event, builtin) of every kind ``manifest``'s deployment accepts."""
    rows: list[tuple[str, str | None, str, bool]] = [
        (entry.kind, entry.target_kind, entry.event, True) for entry in CATALOGUE
    ]
    rows.extend((kind.name, kind.target_kind.value, kind.event, False) for kind in manifest.kinds)
    return rows


async def registry_exists(conn: Any) -> bool:
    return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", REGISTRY))


async def register_kinds(conn: Any, manifest: Manifest) -> list[str]:
    """Register the built-in and declared kinds; return those added or changed. Raises the
    manifest's one-line ConfigurationError when the registry is missing (an outbox migrated
    by an earlier version: run ``realtime-dispatch migrate``)."""
    if not await registry_exists(conn):
        raise manifest.problem(f"{REGISTRY} is missing: run 'realtime-dispatch migrate' first")
    rows = registrations(manifest)
    columns = [list(column) for column in zip(*rows, strict=True)]
    try:
        records = await conn.fetch(_REGISTER_SQL, *columns)
    except asyncpg.PostgresError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise manifest.problem(f"cannot register the declared kinds: {reason}") from None
    return [str(r["kind"]) for r in records]
