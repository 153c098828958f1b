"""Versioned SQL migrations (``<package>/migrations/NNNN_name.sql``): the outbox's own here, and
whatever the owner service adds, handed in by the caller (the reference messenger's, by the
command line through ``realtime_dispatch.messenger.schema``; this module never imports it).
Versions are one sequence across all sources, so each file keeps its number wherever it lives.

Applied in order under an advisory lock, each in its own transaction, and recorded in
``messenger.realtime_schema_migrations``: running ``migrate`` twice, or from two processes at
once, is safe — the second waits for the lock and then finds nothing to do.

:func:`migration_script` is the same SQL as one script (``migrate --print-sql``), records
included, for an adopter to fold into the migrations of their own tool; ``migrate`` then finds
it applied. A migration that meets an existing object of the same name raises
:class:`~realtime_dispatch.errors.SchemaConflict` naming the migration and the object.

The outbox's key columns take the owner's key type (``REALTIME_KEY_TYPE``,
:mod:`realtime_dispatch.values.keys`): its migrations name it by a placeholder, replaced here. An
outbox created with another type is refused by :func:`require_key_type` (every command checks
it before its work), since every query and group would then mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import asyncpg

from realtime_dispatch.errors import ConfigurationError, SchemaConflict
from realtime_dispatch.values.catalogue import CATALOGUE
from realtime_dispatch.values.keys import PLACEHOLDER, UUID_KEYS, VARIABLE, KeyCodec

MIGRATION_LOCK_SQL = "SELECT pg_advisory_lock(hashtextextended('realtime-dispatch:migrate', 0))"
MIGRATION_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtextextended('realtime-dispatch:migrate', 0))"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
BOOKKEEPING_SQL = """
CREATE SCHEMA IF NOT EXISTS messenger;
CREATE TABLE IF NOT EXISTS messenger.realtime_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
""".strip()
_RECORD_SQL = "INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES ($1, $2)"
# "An object of that name exists": what a migration meets in a database that has its own
# tables named like ours (SQLSTATE 42P07 table/index, 42710 object, 42723 function, 42P06
# schema, 42701 column).
_COLLISIONS = (
    asyncpg.DuplicateTableError,
    asyncpg.DuplicateObjectError,
    asyncpg.DuplicateFunctionError,
    asyncpg.DuplicateSchemaError,
    asyncpg.DuplicateColumnError,
)


BUILTIN_KINDS = "@builtin_kinds@"
"""Where a migration lists the built-in kinds (the registry's first rows), from the catalogue."""


def builtin_kinds_sql() -> str:
    """The catalogue's kinds as the VALUES rows of ``messenger.realtime_kinds``."""
    rows = []
    for entry in CATALOGUE:
        target = f"'{entry.target_kind}'" if entry.target_kind else "NULL"
        rows.append(f"    ('{entry.kind}', {target}, '{entry.event}', true)")
    return ",\n".join(rows)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations_in(package: str) -> list[Migration]:
    """The migration files shipped in ``package``'s ``migrations`` folder."""
    found: list[Migration] = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return found


def packaged_migrations(
    extra: Sequence[Migration] = (), keys: KeyCodec = UUID_KEYS
) -> list[Migration]:
    """The outbox's migrations, its key columns of type ``keys``, and ``extra`` (an owner
    service's), in version order."""
    outbox = [
        Migration(
            m.version,
            m.name,
            m.sql.replace(PLACEHOLDER, keys.name).replace(BUILTIN_KINDS, builtin_kinds_sql()),
        )
        for m in migrations_in("realtime_dispatch.outbox")
    ]
    found = [*outbox, *extra]
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


async def applied_versions(conn: asyncpg.Connection) -> set[int]:
    exists = await conn.fetchval("SELECT to_regclass('messenger.realtime_schema_migrations')")
    if exists is None:
        return set()
    rows = await conn.fetch("SELECT version FROM messenger.realtime_schema_migrations")
    return {int(r["version"]) for r in rows}


async def migrate(
    conn: asyncpg.Connection, extra: Sequence[Migration] = (), keys: KeyCodec = UUID_KEYS
) -> list[Migration]:
    """Apply the pending migrations, the outbox's (keys of type ``keys``) and ``extra``; return
    those applied by this call. An outbox there already of another key type is refused before
    anything is applied."""
    applied: list[Migration] = []
    await conn.execute(MIGRATION_LOCK_SQL)
    try:
        await require_key_type(conn, keys)
        await conn.execute(BOOKKEEPING_SQL)
        done = await applied_versions(conn)
        for migration in packaged_migrations(extra, keys):
            if migration.version in done:
                continue
            try:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(_RECORD_SQL, migration.version, migration.name)
            except _COLLISIONS as exc:
                raise SchemaConflict(
                    f"migration {migration.version:04d}_{migration.name}: {_first_line(exc)}"
                ) from None
            applied.append(migration)
    finally:
        await conn.execute(MIGRATION_UNLOCK_SQL)
    return applied


KEY_COLUMNS = ("chat_id", "target_user_id", "message_id", "ref_id")
_KEY_TYPES_SQL = """
SELECT DISTINCT format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = to_regclass('messenger.realtime_outbox') AND attname = ANY($1::text[])
  AND NOT attisdropped
"""


async def outbox_key_type(conn: asyncpg.Connection) -> str | None:
    """The SQL type of the outbox's key columns (``uuid``, ``bigint``, ``text``; several,
    comma-separated, if someone altered one), or None when there is no outbox yet."""
    found = sorted(str(r[0]) for r in await conn.fetch(_KEY_TYPES_SQL, list(KEY_COLUMNS)))
    return ", ".join(found) or None


async def require_key_type(conn: asyncpg.Connection, keys: KeyCodec) -> None:
    """ConfigurationError (exit 2) naming both types when the outbox's key columns are not of
    ``keys``' type; nothing when there is no outbox yet."""
    found = await outbox_key_type(conn)
    if found is not None and found != keys.name:
        raise ConfigurationError(
            VARIABLE,
            f"{keys.name}, but the outbox's key columns ({', '.join(KEY_COLUMNS)}) are {found}:"
            f" set REALTIME_KEY_TYPE={found.split(',')[0]}, or recreate the outbox",
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def migration_script(migrations: Sequence[Migration]) -> str:
    """``migrations`` as one SQL script: the bookkeeping table, then each migration followed by
    its record, so that ``realtime-dispatch migrate`` later finds them applied. No transaction
    statements: the tool that runs it decides (each part is safe inside one)."""
    parts = [f"-- realtime-dispatch schema: {len(migrations)} migrations", BOOKKEEPING_SQL]
    for m in migrations:
        record = (
            "INSERT INTO messenger.realtime_schema_migrations (version, name)"
            f" VALUES ({m.version}, '{m.name}');"
        )
        parts.append(f"-- migration {m.version:04d}_{m.name}\n{m.sql.strip()}\n{record}")
    return "\n\n".join(parts) + "\n"
