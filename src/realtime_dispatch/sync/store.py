"""The sync queries (``queries.sql``) as typed calls: one statement per page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from uuid import UUID

from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.queries import load_queries
from realtime_dispatch.sync.cursor import source_name
from realtime_dispatch.values.keys import Key

_SLOT = ":membership"
_SPANS = ":member_spans"


def _composed(loaded: Mapping[str, str]) -> Mapping[str, str]:
    """The named queries with ``page`` made whole: ``page`` over the reference messenger's
    ``membership``, ``page_spans`` over ``membership_spans`` (still with ``:member_spans`` in
    it, for :func:`spans_page`). One template, so the two pages cannot drift apart."""
    template = loaded["page"]
    assert template.count(_SLOT) == 1, "page: one :membership slot"
    queries = {k: v for k, v in loaded.items() if not k.startswith("membership")}
    queries["page"] = template.replace(_SLOT, loaded["membership"])
    queries["page_spans"] = template.replace(_SLOT, loaded["membership_spans"])
    return MappingProxyType(queries)


QUERIES = _composed(load_queries("realtime_dispatch.sync"))
_ROW_COLUMNS = tuple(field.name for field in fields(ClaimedRow))
"""The page's columns that make the row, named as :class:`ClaimedRow`'s fields."""


def spans_page(member_spans: str) -> str:
    """The page query over an adopter's schema: ``page_spans`` with the manifest's
    ``member_spans`` in place, as a subquery (on lines of its own, so that a trailing ``--``
    comment in it ends where it does). Pure."""
    return QUERIES["page_spans"].replace(_SPANS, f"(\n{member_spans}\n)", 1)


@dataclass(frozen=True, slots=True)
class PageRows:
    """What one page query saw: the horizon, whether the cursor was past what is retained, the
    rows below the horizon (each with its transaction id), in cursor order, and whether a row
    visible now waits at or above the horizon (a transaction that began before it is still
    open: served once that one ends). ``floor``: how far deletions reached (None: none yet)."""

    horizon: int
    floor: int | None
    limited: bool
    rows: list[tuple[int, ClaimedRow]]
    held_back: bool


async def source(conn: DbConnection) -> str:
    record = await conn.fetchrow(QUERIES["source"])
    assert record is not None
    return source_name(int(record["system_identifier"]), int(record["database_oid"]))


async def horizon(conn: DbConnection) -> tuple[int, int | None]:
    """The snapshot's xmin horizon and the retention floor (None: nothing deleted yet)."""
    record = await conn.fetchrow(QUERIES["horizon"])
    assert record is not None
    floor = record["floor"]
    return int(record["horizon"]), None if floor is None else int(floor)


async def page(  # noqa: PLR0917 (the statement's parameters, in order)
    conn: DbConnection,
    user_id: Key,
    after_xid: int,
    after_id: UUID,
    limit: int,
    scan: int,
    *,
    query: str = QUERIES["page"],
) -> PageRows:
    """At most ``limit`` of the caller's rows, out of the ``scan`` rows after the cursor;
    ``query`` is ``page`` (the reference messenger's membership) or a :func:`spans_page`."""
    records = await conn.fetch(query, user_id, after_xid, after_id, limit + 1, scan)
    first = records[0]
    horizon = int(first["horizon"])
    rows = [
        (
            int(r["xid"]),
            ClaimedRow(**{name: r[name] for name in _ROW_COLUMNS}),
        )
        for r in records
        if r["id"] is not None and int(r["xid"]) < horizon
    ][:limit]
    above = any(r["id"] is not None and int(r["xid"]) >= horizon for r in records)
    floor = None if first["floor"] is None else int(first["floor"])
    return PageRows(horizon, floor, bool(first["limited"]), rows, above and len(rows) < limit)


async def edge(
    conn: DbConnection, after_xid: int, after_id: UUID, scan: int
) -> tuple[int, UUID] | None:
    """The (xid, id) of the ``scan``-th row after the cursor; None when there are fewer."""
    record = await conn.fetchrow(QUERIES["edge"], after_xid, after_id, scan)
    return None if record is None else (int(record["xid"]), record["id"])
