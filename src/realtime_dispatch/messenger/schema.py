"""The reference messenger's tables (chats, messages, contacts, calls, conferences, recordings),
migrated together with the outbox they write into: ``realtime-dispatch migrate`` runs
:func:`migrate`."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.outbox import migrate as outbox_schema
from realtime_dispatch.outbox.migrate import Migration
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec


def messenger_migrations() -> list[Migration]:
    return outbox_schema.migrations_in("realtime_dispatch.messenger")


def all_migrations() -> list[Migration]:
    """The outbox's migrations and the messenger's, in version order."""
    return outbox_schema.packaged_migrations(messenger_migrations())


def selected_migrations(*, with_messenger: bool, keys: KeyCodec = UUID_KEYS) -> list[Migration]:
    """Every migration, or the outbox's alone (``migrate --only outbox``, or a manifest set),
    its key columns of type ``keys`` (the messenger's own keys are uuid)."""
    if with_messenger:
        return all_migrations()
    return outbox_schema.packaged_migrations(keys=keys)


async def migrate(
    conn: asyncpg.Connection, *, with_messenger: bool = True, keys: KeyCodec = UUID_KEYS
) -> list[Migration]:
    """Apply every pending migration, the outbox's (keys of type ``keys``) and (unless
    ``with_messenger`` is false) the messenger's."""
    extra = messenger_migrations() if with_messenger else []
    return await outbox_schema.migrate(conn, extra, keys)
