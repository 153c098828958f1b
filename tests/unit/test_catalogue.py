"""The built-in kinds' one table (``realtime_dispatch.values.catalogue``) and everything that
names the kinds elsewhere: the enum, the outbox model's routing rules, the contracts' event map,
the manifest contract's ``serves`` lists, the registry's migration rows, the TypeScript SDK's
event list and generated types, the Python SDK's events, and docs/api.md's event table. A kind
added to one place and not the others fails here, naming what is missing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from realtime_dispatch.client.events import BY_EVENT_NAME
from realtime_dispatch.contracts.base import KeyId, PushPayload
from realtime_dispatch.contracts.events import EVENT_MODELS
from realtime_dispatch.dispatch.projections.builder import CompositePayloadBuilder
from realtime_dispatch.dispatch.projections.projection import ColumnsBuilder
from realtime_dispatch.dispatch.projections.registry import default_builders
from realtime_dispatch.errors import IntentError
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.outbox.migrate import builtin_kinds_sql
from realtime_dispatch.outbox.model import (
    OutboxIntent,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    SessionKind,
)
from realtime_dispatch.values.catalogue import CATALOGUE, _rows

ROOT = Path(__file__).resolve().parents[2]
EVENTS = [entry.event for entry in CATALOGUE]


def test_the_enum_is_the_catalogue_in_its_order() -> None:
    assert [kind.value for kind in RealtimeDispatchKind] == [e.kind for e in CATALOGUE]
    assert [kind.event_name for kind in RealtimeDispatchKind] == EVENTS


def test_each_kind_goes_where_its_row_says() -> None:
    """The model's routing rule agrees with the row's target (a session kind goes either way,
    by its session kind)."""
    for entry in CATALOGUE:
        kind = RealtimeDispatchKind(entry.kind)
        ids = {"message_id": "m", "ref_id": "r", "seq": 1}
        if entry.target == "session":
            OutboxIntent(kind, RealtimeTargetKind.USER, target_user_id="u", ref_id="r",
                         session_kind=SessionKind.DIRECT)  # fmt: skip
            OutboxIntent(kind, RealtimeTargetKind.CHAT_GROUP, chat_id="c", ref_id="r",
                         session_kind=SessionKind.CONFERENCE)  # fmt: skip
        elif entry.target == "chat":
            OutboxIntent(kind, RealtimeTargetKind.CHAT_GROUP, chat_id="c", **ids)  # type: ignore[arg-type]
            with pytest.raises(IntentError, match="goes to a ChatGroup"):
                OutboxIntent(kind, RealtimeTargetKind.USER, target_user_id="u", **ids)  # type: ignore[arg-type]
        else:
            OutboxIntent(kind, RealtimeTargetKind.USER, target_user_id="u", ref_id="r")
            with pytest.raises(IntentError, match="goes to a User"):
                OutboxIntent(kind, RealtimeTargetKind.CHAT_GROUP, chat_id="c", ref_id="r")


def test_each_contract_is_the_event_map_s_model() -> None:
    assert list(EVENT_MODELS) == EVENTS
    for entry in CATALOGUE:
        model = EVENT_MODELS[entry.event]
        module = model.__module__.removeprefix("realtime_dispatch.contracts.")
        assert f"{module}.{model.__name__}" == entry.contract, entry.kind
    assert dict(BY_EVENT_NAME) == dict(EVENT_MODELS)  # the Python SDK's events


def test_a_row_s_options_and_its_mistakes() -> None:
    """``event=`` overrides the snake_case name, ``contract=`` the class's name; a row with
    an unknown target, ids or option stops the import."""
    (entry,) = _rows("PinAdded  chat  ref  chats  ids  event=pin  contract=ChatPin")
    assert (entry.event, entry.contract, entry.query, entry.target_kind) == (
        "pin",
        "chats.ChatPin",
        None,
        "ChatGroup",
    )
    (plain,) = _rows("PinAdded  user  ref  chats  pins")
    assert (plain.event, plain.contract, plain.query) == ("pin_added", "chats.PinAdded", "pins")
    for bad in (
        "PinAdded  group  ref  chats  pins",
        "PinAdded  chat  id  chats  pins",
        "PinAdded  chat  ref  chats  pins  evnt=pin",
    ):
        with pytest.raises(ValueError, match="catalogue row PinAdded"):
            _rows(bad)


def test_each_kind_is_built_by_the_builder_its_row_names() -> None:
    """Every kind has exactly one shipped builder, the one reading its row's query (``ids``:
    the ids builder); the composite refuses two builders for a kind."""
    built: dict[str, str] = {}
    for builder in default_builders():
        for kind in builder.kinds:
            assert kind.value not in built, kind
            built[kind.value] = str(builder.query)  # type: ignore[attr-defined]
    CompositePayloadBuilder(default_builders())
    assert built == {entry.kind: entry.builder for entry in CATALOGUE}


def test_a_contract_read_from_columns_must_name_the_query_s_columns() -> None:
    """A kind built from its query's columns as they are: each field of its contract is a
    column of the query (the entity's ``id`` as ``<entity>_id``), and a ``user`` kind needs the
    query's audience column; a slip fails when the builders are made, naming it."""

    class ChatEventNoted(PushPayload):
        chat_id: KeyId
        chat_event_id: KeyId
        event_kynd: str

    kind = RealtimeDispatchKind.CHAT_UPDATED
    query = CONTRACT["chat_events"]
    with pytest.raises(
        ValueError, match="ChatEventNoted: no column of the chat_events query for event_kynd"
    ):
        ColumnsBuilder(query, {kind: ("chat", ChatEventNoted)}, sql=None)
    with pytest.raises(ValueError, match="names no audience column"):
        ColumnsBuilder(query, {kind: ("user", EVENT_MODELS["chat_updated"])}, sql=None)
    built = ColumnsBuilder(query, {kind: ("chat", EVENT_MODELS["chat_updated"])}, sql=None)
    assert (built.query, built.entity, built.kinds) == ("chat_events", "ChatEvent", {kind})


def test_each_kind_is_served_by_its_manifest_query() -> None:
    for entry in CATALOGUE:
        if entry.query is None:  # ids only: no query
            continue
        contract = CONTRACT[entry.query]
        assert contract.role == "payload", entry.kind
        assert re.search(rf"\b{entry.kind}\b", contract.serves), (entry.kind, entry.query)
    served = {
        kind
        for contract in CONTRACT.values()
        if contract.role == "payload"
        for kind in re.findall(r"\b[A-Z][A-Za-z]+\b", contract.serves)
        if kind not in ("Direct", "Conference")
    }
    assert served == {entry.kind for entry in CATALOGUE if entry.query is not None}


def test_the_registry_migration_lists_every_kind() -> None:
    rows = builtin_kinds_sql()
    for entry in CATALOGUE:
        assert f"('{entry.kind}', " in rows
        assert f"'{entry.event}', true)" in rows


def test_the_typescript_sdk_names_every_event() -> None:
    """Both generated (scripts/gen_js_types.py; tests/e2e/test_js_sdk.py fails on a stale
    file): the SDK's event list and its typed events."""
    contracts = (ROOT / "clients/js/src/contracts.ts").read_text()
    listed = re.search(
        r"EVENT_NAMES: readonly \(keyof HubEvents\)\[\] = \[(.*?)\];", contracts, re.S
    )
    assert listed is not None
    assert re.findall(r'"([a-z_]+)"', listed[1]) == EVENTS
    client = (ROOT / "clients/js/src/client.ts").read_text()
    assert "export { EVENT_NAMES };" in client
    hub_events = re.search(r"export interface HubEvents \{(.*?)\}", contracts, re.S)
    assert hub_events is not None
    assert sorted(re.findall(r"^\s*([a-z_]+):", hub_events[1], re.M)) == sorted(EVENTS)


def _table_events(text: str) -> set[str]:
    """The events of docs/api.md's event table: the first cell's names, an abbreviated one
    (`` `_left` `` after `` `conference_participant_joined` ``) completed from the first."""
    section = text.split("## Events (hub invocations", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        names = re.findall(r"`([a-z_]+)`", line.split("|")[1])
        if not names:  # another table of the section (chat_updated's eventKind values)
            continue
        first = names[0]
        found.add(first)
        for name in names[1:]:
            found.add(first.rsplit("_", 1)[0] + name if name.startswith("_") else name)
    return found


def test_the_docs_event_table_has_every_event() -> None:
    documented = _table_events((ROOT / "docs/api.md").read_text())
    assert set(EVENTS) <= documented, set(EVENTS) - documented


def test_the_docs_event_table_is_the_generated_one() -> None:
    """docs/api.md's table is what ``scripts/gen_docs_events.py`` writes from the catalogue
    and the payload models (a field renamed, a kind added: the check names the command)."""
    done = subprocess.run(
        [sys.executable, "scripts/gen_docs_events.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
