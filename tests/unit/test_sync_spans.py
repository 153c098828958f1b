"""The sync page over an adopter's ``member_spans`` (pure): the manifest's text composed into
the page query as a subquery, nothing else of the statement changed."""

from __future__ import annotations

from realtime_dispatch.sync.store import QUERIES, spans_page

SPANS = 'SELECT "Room" AS chat_id, "In" AS joined_at, "Out" AS left_at -- note\nFROM "M"'


def test_member_spans_takes_the_place_of_its_marker_as_a_subquery() -> None:
    composed = spans_page(SPANS)
    assert ":member_spans" not in composed
    assert f"FROM (\n{SPANS}\n) AS m" in composed  # a trailing comment ends on its own line
    before, _, after = QUERIES["page_spans"].partition(":member_spans")
    assert composed == f"{before}(\n{SPANS}\n){after}"


def test_the_composed_page_keeps_the_reference_pages_scan_and_bound() -> None:
    composed = spans_page(SPANS)
    scan = QUERIES["page"][QUERIES["page"].index("FROM messenger.realtime_outbox") :]
    scan = scan[: scan.index(") s")]
    assert scan in composed  # the same range scan of ix_rto_sync, LIMIT $5
    assert composed.count("$5") == QUERIES["page"].count("$5")
    assert composed.count("$4") == QUERIES["page"].count("$4")
