"""The sync cursor (pure): what the server writes it parses back, in order, and anything else
is refused before a query runs."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from realtime_dispatch.sync.cursor import NIL, CursorError, SyncCursor, parse_cursor, source_name


def test_a_cursor_round_trips_and_orders_by_position() -> None:
    source = source_name(7714296625079191680, 16384)
    row = uuid4()
    cursor = SyncCursor(2**63 + 5, row, source)
    assert parse_cursor(cursor.encode()) == cursor
    at_horizon = SyncCursor.at_horizon(source, 2**63 + 5)
    assert at_horizon.after_id == NIL
    assert at_horizon < cursor < SyncCursor.at_horizon(source, 2**63 + 6)
    assert max(cursor, at_horizon) is cursor


def test_sources_tell_databases_and_clusters_apart() -> None:
    names = {source_name(system, oid) for system in (1, 2**63) for oid in (5, 16384, 16385)}
    assert len(names) == 6
    assert all(len(name) == 16 for name in names)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "0123456789abcdef.12",
        "0123456789ABCDEF.1." + "0" * 32,  # upper case: not what the server writes
        "0123456789abcdef.-1." + "0" * 32,
        "0123456789abcdef.99999999999999999999." + "0" * 32,  # above 2**64 - 1
        "0123456789abcdef.1." + "g" * 32,
        "0123456789abcdef.1." + "0" * 31,
        # H19: ASCII digits and hex only; nothing after the cursor.
        "0123456789abcdef.\u0661\u0662." + "0" * 32,  # Arabic-Indic 12
        "0123456789abcdef.\uff11." + "0" * 32,  # a full-width 1
        "0123456789abcdef.1." + "0" * 32 + "\n",
        "0123456789abcdef.1." + "0" * 32 + " ",
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(CursorError, match="cursor") as refused:
        parse_cursor(text)
    assert refused.value.code == "BadCursor"


def test_the_nil_id_is_the_start_of_a_transaction() -> None:
    assert UUID(int=0) == NIL


def test_a_cursor_at_the_horizon_is_never_at_or_below_the_retention_floor() -> None:
    source = "0123456789abcdef"
    assert SyncCursor.at_horizon(source, 100, None).xid == 100
    assert SyncCursor.at_horizon(source, 100, 40).xid == 100
    assert SyncCursor.at_horizon(source, 100, 100).xid == 101  # floor >= xid is limited
    assert SyncCursor.at_horizon(source, 100, 250).xid == 251
