"""Parsing the manifest's ``-- kind:`` blocks (pure): what a valid block gives, and one line
naming the kind and the reason for each bad declaration (issue 48, "Bad input"); the TypeScript
module of ``realtime-dispatch kinds --typescript``."""

from __future__ import annotations

import pytest

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.kinds import camel, column_problem, typescript_module
from realtime_dispatch.manifest.manifest import Manifest, parse_manifest
from realtime_dispatch.values.keys import BIGINT_KEYS, UUID_KEYS

MEMBER_CHATS = (
    "-- name: member_chats\nSELECT user_id, chat_id FROM app.member WHERE user_id = ANY($1);\n"
)
ADDED = """
-- kind: ReactionAdded
-- target: chat
-- event: reaction_added
-- Comments under the directives are fine.
SELECT r.id AS ref_id, r.emoji FROM app.reaction r WHERE r.id = ANY($1);
"""
REMOVED = """
-- kind: ReactionRemoved
-- target: chat
-- event: reaction_removed
-- payload: ids
"""


def parse(*blocks: str) -> Manifest:
    return parse_manifest(MEMBER_CHATS + "".join(blocks), "m.sql")


def refusal(*blocks: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        parse(*blocks)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("REALTIME_PROJECTIONS: ")
    assert message.endswith(" (m.sql)")
    return message.removeprefix("REALTIME_PROJECTIONS: ").removesuffix(" (m.sql)")


def test_kinds_are_read_beside_named_queries() -> None:
    manifest = parse(ADDED, "-- name: deleted_chats\nSELECT chat_id FROM app.gone;\n", REMOVED)
    assert [k.name for k in manifest.kinds] == ["ReactionAdded", "ReactionRemoved"]
    added, removed = manifest.kinds
    assert (added.target, added.event, added.ids_only) == ("chat", "reaction_added", False)
    assert added.sql == "SELECT r.id AS ref_id, r.emoji FROM app.reaction r WHERE r.id = ANY($1)"
    assert (removed.ids_only, removed.sql) == (True, None)
    assert manifest.sql("deleted_chats") == "SELECT chat_id FROM app.gone"
    assert manifest.sql("member_chats") is not None
    assert manifest.kind("ReactionRemoved") is removed
    assert not added.deliver_when_chat_deleted


def test_a_kind_block_may_come_first_and_opt_out_of_deleted_chats() -> None:
    block = "-- kind: ChatEnded\n-- target: chat\n-- event: chat_ended\n-- payload: ids\n"
    manifest = parse_manifest(block + "-- deleted_chats: deliver\n" * 0 + MEMBER_CHATS, "m.sql")
    assert manifest.kinds[0].name == "ChatEnded"
    opted = parse(
        "-- kind: ChatEnded\n-- target: chat\n-- event: chat_ended\n-- deleted_chats: deliver\n"
        "SELECT id AS ref_id FROM app.chat WHERE id = ANY($1);\n"
    )
    assert opted.kinds[0].deliver_when_chat_deleted


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (
            "-- kind: MessageReceived\n-- target: chat\n-- event: my_message\n-- payload: ids\n",
            "kind MessageReceived: a built-in kind (declare only the app's own)",
        ),
        (
            "-- kind: reaction_added\n-- target: chat\n-- event: reaction_added\n-- payload: ids\n",
            "kind reaction_added: not a kind name (PascalCase, letters and digits, at most 32"
            " characters)",
        ),
        (
            f"-- kind: {'A' * 33}\n-- target: chat\n-- event: long\n-- payload: ids\n",
            f"kind {'A' * 33}: not a kind name",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- event: Pinned\n-- payload: ids\n",
            "kind Pinned: event must be a snake_case name of at most 64 characters (got Pinned)",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- event: message_received\n-- payload: ids\n",
            "kind Pinned: event message_received is a built-in event",
        ),
        (
            "-- kind: Pinned\n-- target: room\n-- event: pinned\n-- payload: ids\n",
            "kind Pinned: target must be chat or user (got room)",
        ),
        (
            "-- kind: Pinned\n-- event: pinned\n-- payload: ids\n",
            "kind Pinned: target must be chat or user (got none)",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- event: pinned\n",
            "kind Pinned: no query (write one, or '-- payload: ids')",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- event: pinned\n-- payload: ids\nSELECT 1;\n",
            "kind Pinned: payload: ids takes no query",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- event: pinned\n-- payload: all\n",
            "kind Pinned: payload must be ids (got all)",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- evnt: pinned\n-- payload: ids\n",
            "kind Pinned: unknown directive '-- evnt:'",
        ),
        (
            "-- kind: Pinned\n-- target: chat\n-- target: user\n-- event: pinned\n"
            "-- payload: ids\n",
            "kind Pinned: '-- target:' given twice",
        ),
        (
            REMOVED + REMOVED,
            "kind ReactionRemoved: declared twice",
        ),
        (
            REMOVED + REMOVED.replace("ReactionRemoved", "ReactionGone"),
            "kind ReactionGone: event reaction_removed is also ReactionRemoved's",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_naming_the_kind(block: str, reason: str) -> None:
    assert refusal(block).startswith(reason)


def test_columns_a_payload_cannot_carry() -> None:
    (kind,) = parse(ADDED).kinds
    assert column_problem("emoji", "text", kind, UUID_KEYS) is None
    assert column_problem("tags", "_text", kind, UUID_KEYS) is None
    assert column_problem("meta", "jsonb", kind, UUID_KEYS) is None
    assert column_problem("at", "interval", kind, UUID_KEYS) == (
        "column at cannot be sent: interval has no JSON form"
    )
    assert column_problem("event_id", "uuid", kind, UUID_KEYS) == (
        "column event_id: eventId is the outbox row's id"
    )
    assert column_problem("ref_id", "int8", kind, BIGINT_KEYS) is None
    assert column_problem("ref_id", "uuid", kind, BIGINT_KEYS) == (
        "column ref_id is uuid, expected bigint (matched to the row's ref_id)"
    )
    assert camel("message_id") == "messageId"
    assert camel("created_at_utc") == "createdAtUtc"


def test_typescript_types_follow_the_columns_and_the_key_type() -> None:
    manifest = parse(ADDED, REMOVED)
    columns = {
        "ReactionAdded": [
            ("ref_id", "int8"),
            ("user_id", "int8"),
            ("emoji", "text"),
            ("meta", "jsonb"),
            ("tags", "_text"),
            ("created_at", "timestamptz"),
        ]
    }
    module = typescript_module(manifest.kinds, columns, BIGINT_KEYS, source="m.sql")
    assert "export interface ReactionAddedPayload {\n  eventId: string;\n  chatId: number;\n" in (
        module
    )
    assert "  refId: number;\n  userId: number | null;\n  emoji: string | null;\n" in module
    assert "  meta: unknown | null;\n  tags: string[] | null;\n  createdAt: string | null;\n" in (
        module
    )
    assert "export interface ReactionRemovedPayload {" in module
    assert "  refId?: number;\n  messageId?: number;\n  seq?: number;\n" in module
    assert (
        "  reaction_added: ReactionAddedPayload;\n  reaction_removed: ReactionRemovedPayload;"
        in (module)
    )
