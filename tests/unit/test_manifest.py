"""The manifest's file format, its contract (and the docs' table of it), and the comparison of
a prepared query with the contract: pure, no database."""

from __future__ import annotations

from pathlib import Path

import pytest

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.check import compare
from realtime_dispatch.manifest.contract import CONTRACT, QUERIES
from realtime_dispatch.manifest.manifest import load_manifest, parse_manifest, shipped_manifest
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.settings import load_settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
MESSAGES = CONTRACT["messages"]
MESSAGE_COLUMNS = [(c.name, "text") for c in MESSAGES.columns]


def test_the_shipped_manifest_has_every_query_of_the_contract() -> None:
    current = [q.name for q in QUERIES if q.role != "deprecated"]
    assert list(shipped_manifest().queries) == current


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("SELECT 1;\n-- name: messages\nSELECT 1", "SQL before the first '-- name:' line"),
        ("-- name: messages\nSELECT 1\n-- name: messages\nSELECT 2", "messages: named twice"),
        ("-- name: messages\n-- only a comment\n", "messages: no SQL under its name"),
        ("-- name: mesages\nSELECT 1", "mesages: not a query of the contract (known: messages,"),
        ("-- name: two words\nSELECT 1", "'-- name: two words' is not a query name"),
        ("-- just comments\n", "no '-- name: <query>' sections"),
    ],
)
def test_a_malformed_manifest_is_one_line_naming_the_variable(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_manifest(text, "/srv/projections.sql")
    message = str(caught.value)
    assert message.startswith(f"REALTIME_PROJECTIONS: {problem}"), message
    assert message.endswith("(/srv/projections.sql)")


def test_an_unreadable_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="REALTIME_PROJECTIONS: cannot read"):
        load_manifest(tmp_path / "missing.sql")
    with pytest.raises(ConfigurationError, match="REALTIME_PROJECTIONS"):
        load_settings(projections=str(tmp_path / "missing.sql"))


def test_an_empty_variable_is_unset() -> None:
    settings = load_settings(projections="")
    assert settings.reference_messenger
    assert settings.projection_manifest().shipped


def test_comments_and_semicolons_are_not_part_of_a_query() -> None:
    manifest = parse_manifest(
        "-- header\n\n-- name: chat_alive\n-- why\nSELECT $1::uuid[] AS chat_id;\n", "f.sql"
    )
    assert manifest.queries == {"chat_alive": "SELECT $1::uuid[] AS chat_id"}
    assert manifest.sql("messages") is None


@pytest.mark.parametrize(
    ("params", "columns", "problem"),
    [
        (["uuid[]"], [*MESSAGE_COLUMNS, ("extra", "int4")], None),
        (["uuid[]"], [c for c in MESSAGE_COLUMNS if c[0] != "seq"], "column seq missing"),
        (["uuid[]"], [("seq", "numeric")], "column id missing"),
        (["uuid"], MESSAGE_COLUMNS, "takes (uuid), expected one parameter $1 uuid[]"),
        ([], MESSAGE_COLUMNS, "takes (none), expected one parameter $1 uuid[]"),
        (["uuid[]", "int4"], MESSAGE_COLUMNS, "takes (uuid[], int4), expected one parameter"),
        (["uuid[]"], [*MESSAGE_COLUMNS, ("id", "uuid")], "column id returned twice"),
    ],
)
def test_compare_names_the_first_mismatch(
    params: list[str], columns: list[tuple[str, str]], problem: str | None
) -> None:
    typed = {
        "id": "uuid",
        "chat_id": "uuid",
        "sender_user_id": "uuid",
        "seq": "int8",
        "file_meta": "jsonb",
    }
    columns = [
        (name, typed.get(name, "timestamptz" if name.endswith("_at") else t)) for name, t in columns
    ]
    found = compare(MESSAGES, params, columns)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem), found


def test_a_column_of_another_type_family_is_a_mismatch() -> None:
    columns = [
        (
            c.name,
            {
                "uuid": "uuid",
                "integer": "int4",
                "timestamptz": "timestamptz",
                "json": "json",
                "text": "varchar",
            }[c.family],
        )
        for c in MESSAGES.columns
    ]
    assert compare(MESSAGES, ["uuid[]"], columns) is None
    columns[columns.index(("sent_at", "timestamptz"))] = ("sent_at", "timestamp")
    assert compare(MESSAGES, ["uuid[]"], columns) == (
        "column sent_at is timestamp, expected timestamptz"
    )


def test_every_kind_is_served_by_a_payload_query() -> None:
    served = " ".join(q.serves for q in QUERIES if q.role == "payload")
    assert [k.value for k in RealtimeDispatchKind if k.value not in served] == []


def contract_table() -> str:
    """docs/reference.md's table of the contract, as the contract says it."""
    lines = [
        "| query | serves | `$1 uuid[]` holds | column | type | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for query in QUERIES:
        for i, column in enumerate(query.columns):
            head = (
                f"`{query.name}`{'' if query.role == 'payload' else f' ({query.role})'}",
                query.serves,
                f"`{query.param}`" if query.param.isidentifier() else query.param,
            )
            cells = head if i == 0 else ("", "", "")
            lines.append(
                f"| {' | '.join(cells)} | `{column.name}` | {column.family} | {column.meaning} |"
            )
    return "\n".join(lines)


def test_the_reference_docs_carry_the_contract_table() -> None:
    assert contract_table() in REFERENCE.read_text(), contract_table()


def test_member_spans_takes_one_key_not_an_array() -> None:
    spans = CONTRACT["member_spans"]
    columns = [("chat_id", "uuid"), ("joined_at", "timestamptz"), ("left_at", "timestamptz")]
    assert compare(spans, ["uuid"], columns) is None
    assert compare(spans, ["uuid[]"], columns) == ("takes (uuid[]), expected one parameter $1 uuid")
    assert compare(spans, ["uuid"], columns[:2]) == "column left_at missing"
    assert compare(spans, ["uuid"], [*columns[:2], ("left_at", "timestamp")]) == (
        "column left_at is timestamp, expected timestamptz"
    )
