"""Time-ordered ids (UUIDv7): insertion order is id order, which the claim relies on."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import uuid_utils.compat


def new_id() -> UUID:
    """A fresh UUIDv7 as a standard :class:`uuid.UUID`."""
    return uuid_utils.compat.uuid7()


def id_floor(moment: datetime) -> UUID:
    """The smallest UUIDv7 of ``moment``: every id created before it sorts below."""
    millis = int(moment.timestamp() * 1000)
    return UUID(int=(millis << 80) | (0x7 << 76) | (0b10 << 62))
