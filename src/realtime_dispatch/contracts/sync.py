"""The page of ``GET /api/sync`` (the pipeline's resume endpoint, :mod:`realtime_dispatch.sync`):
the outbox read back as events, each exactly what its push carried."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import Field

from realtime_dispatch.contracts.base import ApiModel


class SyncEventOut(ApiModel):
    event_id: UUID = Field(description="The outbox row: the same id as the push's `eventId`.")
    target: str = Field(description="The event name, as in the hub invocation's `target`.")
    payload: dict[str, Any] = Field(description="Exactly what the push carries.")


class SyncPageOut(ApiModel):
    events: list[SyncEventOut]
    next_cursor: str = Field(description="Pass as `since` next time (opaque).")
    limited: bool = Field(
        description="The cursor is past what the outbox retains (or from another database):"
        " resync fully over REST, then continue from `nextCursor`."
    )
    held_back: bool = Field(
        default=False,
        description="Newer events wait behind a transaction still open: ask again shortly"
        " (they are never skipped; the cursor stays before them).",
    )
    more: bool = Field(
        default=False,
        description="The page stopped at its page size or its scan bound: ask again at once"
        " from `nextCursor` (a page may hold fewer events than `limit`, or none, and still"
        " have more after it).",
    )
