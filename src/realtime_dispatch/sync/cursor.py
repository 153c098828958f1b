"""The sync cursor (pure): where a client's reading of the outbox stands.

A cursor is a position ``(xid, id)`` in commit-safe order (see the 0023 migration) and the
source it belongs to: ``<source>.<xid>.<id hex>``, where ``source`` names the cluster and the
database (a cursor from another database answers ``limited``, never a silent gap). Clients
treat it as opaque; :func:`parse_cursor` refuses anything it did not write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from uuid import UUID

from realtime_dispatch.errors import RealtimeDispatchError

NIL = UUID(int=0)
# ASCII only: ``\d`` would take Arabic-Indic or other Unicode digits, and ``$`` a final newline.
_CURSOR = re.compile(r"([0-9a-f]{16})\.([0-9]{1,20})\.([0-9a-f]{32})", re.ASCII)
_MAX_XID = 2**64 - 1


class CursorError(RealtimeDispatchError):
    """A ``since`` that is not a cursor this server wrote (answered with 400)."""

    code = "BadCursor"


@dataclass(frozen=True, slots=True, order=True)
class SyncCursor:
    """Rows strictly after ``(xid, after_id)`` are still to come."""

    xid: int
    after_id: UUID
    source: str

    def encode(self) -> str:
        return f"{self.source}.{self.xid}.{self.after_id.hex}"

    @classmethod
    def at_horizon(cls, source: str, horizon: int, floor: int | None = None) -> SyncCursor:
        """Everything below ``horizon`` (a snapshot's xmin) has been read; with the retention
        ``floor`` (how far deletions reached), never at or below it, where the cursor would be
        answered ``limited`` again: the horizon is the cluster's, and a transaction open
        elsewhere can hold it below the floor."""
        return cls(horizon if floor is None else max(horizon, floor + 1), NIL, source)


def parse_cursor(text: str) -> SyncCursor:
    match = _CURSOR.fullmatch(text)
    if match is None or int(match[2]) > _MAX_XID:
        raise CursorError("since: not a sync cursor (pass nextCursor as it came)")
    return SyncCursor(int(match[2]), UUID(hex=match[3]), match[1])


def source_name(system_identifier: int, database_oid: int) -> str:
    """16 hex digits naming one database of one cluster (its ``pg_control`` identifier and its
    oid: a restore elsewhere, or another database, gets another name)."""
    mixed = (system_identifier * 0x9E3779B97F4A7C15 + database_oid) % 2**64
    return f"{mixed:016x}"
