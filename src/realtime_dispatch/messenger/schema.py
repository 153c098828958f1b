"""The reference messenger's tables (chats, messages, contacts, calls, conferences, recordings),
migrated together with the outbox they write into: ``realtime-dispatch migrate`` runs
:func:`migrate`."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.outbox import migrate as outbox_schema
from realtime_dispatch.outbox.migrate import Migration


def messenger_migrations() -> list[Migration]:
    return outbox_schema.migrations_in("realtime_dispatch.messenger")


def all_migrations() -> list[Migration]:
    """The outbox's migrations and the messenger's, in version order."""
    return outbox_schema.packaged_migrations(messenger_migrations())


async def migrate(conn: asyncpg.Connection) -> list[Migration]:
    """Apply every pending migration, the outbox's and the messenger's."""
    return await outbox_schema.migrate(conn, messenger_migrations())
