"""``REALTIME_KEY_TYPE``'s codecs and where they decide: a token's user claim, a client's JSON
argument, notifications, groups, the outbox's migrations and the manifest check's messages.
Pure, no database (tests/e2e/test_own_keys.py runs them through real processes)."""

from __future__ import annotations

import time
import uuid

import jwt
import pytest

from realtime_dispatch.auth.revocations import parse_change as parse_revocation
from realtime_dispatch.auth.tokens import AuthError, TokenOptions, TokenVerifier, mint_token
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.hub.membership.tracker import parse_change as parse_membership
from realtime_dispatch.hub.signals.typing_signal import chat_of
from realtime_dispatch.manifest.check import compare
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.messenger.schema import selected_migrations
from realtime_dispatch.outbox.migrate import migration_script
from realtime_dispatch.outbox.model import RealtimeTargetKind, group_name
from realtime_dispatch.settings import load_settings
from realtime_dispatch.values.keys import BIGINT_KEYS, TEXT_KEYS, UUID_KEYS, KeyCodec, key_codec

SECRET = "a-test-secret-of-at-least-32-bytes!!"
U = uuid.UUID("0190d6a8-7c3e-7b1a-9f00-0123456789ab")


@pytest.mark.parametrize(
    ("codec", "value", "key"),
    [
        (UUID_KEYS, str(U), U),
        (BIGINT_KEYS, 42, 42),
        (BIGINT_KEYS, "42", 42),
        (BIGINT_KEYS, "-7", -7),
        (BIGINT_KEYS, 2**63 - 1, 2**63 - 1),
        (TEXT_KEYS, "ana", "ana"),
    ],
)
def test_a_claim_of_the_type_is_its_key(codec: KeyCodec, value: object, key: object) -> None:
    assert codec.from_claim(value) == key


@pytest.mark.parametrize(
    ("codec", "value"),
    [
        (UUID_KEYS, str(U).upper()),  # one user, one spelling
        (UUID_KEYS, 42),
        (UUID_KEYS, "42"),
        (BIGINT_KEYS, str(U)),
        (BIGINT_KEYS, True),  # a JSON boolean is no integer
        (BIGINT_KEYS, 4.2),
        (BIGINT_KEYS, "042"),
        (BIGINT_KEYS, "+42"),
        (BIGINT_KEYS, " 42"),
        (BIGINT_KEYS, 2**63),
        (BIGINT_KEYS, "99999999999999999999"),
        (TEXT_KEYS, 7),
        (TEXT_KEYS, ""),
        (TEXT_KEYS, "a\nb"),
        (TEXT_KEYS, "x" * 129),
    ],
)
def test_anything_else_is_refused(codec: KeyCodec, value: object) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        codec.from_claim(value)


def test_ids_go_to_json_as_numbers_for_bigint_and_strings_otherwise() -> None:
    assert UUID_KEYS.to_json(U) == str(U)
    assert BIGINT_KEYS.to_json(17) == 17
    assert TEXT_KEYS.to_json("design") == "design"
    assert [key_codec(n).array_type for n in ("uuid", "bigint", "text")] == [
        "uuid[]",
        "int8[]",
        "text[]",
    ]
    assert group_name(RealtimeTargetKind.CHAT_GROUP, 17, None) == "chat:17"
    assert group_name(RealtimeTargetKind.USER, None, 42) == "user:42"


def _token(sub: object) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time() + 60)}, SECRET, algorithm="HS256")


async def test_the_user_claim_must_be_a_key_of_the_type() -> None:
    bigint = TokenVerifier(TokenOptions(secret=SECRET, keys=BIGINT_KEYS))
    assert (await bigint.verify(_token(42))).user_id == 42
    assert (await bigint.verify(_token("42"))).user_id == 42
    assert (await bigint.verify(mint_token(SECRET, 42))).user_id == 42
    for sub in (str(U), "forty-two", 4.2, True):
        with pytest.raises(AuthError) as caught:
            await bigint.verify(_token(sub))
        assert caught.value.code == "InvalidSubject", sub
        # the reason (the 401's error_description) says what a key of this type is
        assert str(caught.value) == (
            "user claim sub is not a user id"
            " (a decimal integer in the bigint range, a JSON number or string)"
        ), sub
    text = TokenVerifier(TokenOptions(secret=SECRET, keys=TEXT_KEYS))
    assert (await text.verify(_token("ana"))).user_id == "ana"
    with pytest.raises(AuthError) as caught:
        await text.verify(_token(7))
    assert str(caught.value) == ("user claim sub is not a user id (1 to 128 printable characters)")
    uuid_keys = TokenVerifier(TokenOptions(secret=SECRET))
    assert (await uuid_keys.verify(_token(str(U)))).user_id == U
    with pytest.raises(AuthError):  # as before: an integer sub is no token at all for uuid keys
        await uuid_keys.verify(_token(42))


def test_notifications_carry_the_ids_as_the_trigger_writes_them() -> None:
    change = parse_membership('{"chatId": 17, "userId": "42", "active": true}', BIGINT_KEYS)
    assert change is not None
    assert (change.chat_id, change.user_id, change.active) == (17, 42, True)
    assert parse_membership('{"chatId": 17, "userId": 42, "active": true}') is None  # uuid keys
    revoked = parse_revocation('{"userId": 42, "revokedAt": 1700000000}', BIGINT_KEYS)
    assert revoked is not None
    assert revoked.user_id == 42


def test_typing_spells_the_chat_as_its_group_does() -> None:
    assert chat_of((17,), BIGINT_KEYS) == (17, "chat:17")
    assert chat_of(("17",), BIGINT_KEYS) == (17, "chat:17")
    assert chat_of(("design",), TEXT_KEYS) == ("design", "chat:design")
    assert chat_of((str(U).upper(),)) == (str(U), f"chat:{U}")  # uuid keys, as before


def test_the_outbox_migrations_take_the_key_type() -> None:
    for codec in (UUID_KEYS, BIGINT_KEYS, TEXT_KEYS):
        script = " ".join(
            migration_script(selected_migrations(with_messenger=False, keys=codec)).split()
        )
        assert "@key_type@" not in script
        assert "id uuid PRIMARY KEY" in script  # the row's own id stays a UUIDv7
        for column in ("chat_id", "target_user_id", "message_id", "ref_id"):
            assert f"{column} {codec.name} NULL" in script
        assert f"realtime_partition(chat_id {codec.name}, target_user_id {codec.name}" in script
        assert f"user_id {codec.name} PRIMARY KEY" in script  # revocations


MESSAGES = CONTRACT["messages"]


def _message_columns(key: str) -> list[tuple[str, str]]:
    types = {"uuid": key, "integer": "int8", "text": "text", "json": "jsonb"}
    return [(c.name, types.get(c.family, "timestamptz")) for c in MESSAGES.columns]


@pytest.mark.parametrize(
    ("codec", "params", "key", "problem"),
    [
        (BIGINT_KEYS, ["int8[]"], "int8", None),
        (BIGINT_KEYS, ["int8[]"], "int4", None),  # Django's AutoField: an integer key
        (TEXT_KEYS, ["text[]"], "varchar", None),
        (
            BIGINT_KEYS,
            ["uuid[]"],
            "int8",
            "takes (uuid[]), expected one parameter $1 int8[] (REALTIME_KEY_TYPE=bigint)",
        ),
        (
            BIGINT_KEYS,
            ["int4[]"],
            "int8",
            "takes (int4[]), expected one parameter $1 int8[] (REALTIME_KEY_TYPE=bigint)",
        ),
        (BIGINT_KEYS, ["int8[]"], "uuid", "column id is uuid, expected bigint"),
        (
            TEXT_KEYS,
            ["int8[]"],
            "text",
            "takes (int8[]), expected one parameter $1 text[] (REALTIME_KEY_TYPE=text)",
        ),
        (TEXT_KEYS, ["text[]"], "int8", "column id is int8, expected text"),
        (UUID_KEYS, ["int8[]"], "uuid", "takes (int8[]), expected one parameter $1 uuid[]"),
        (UUID_KEYS, ["uuid[]"], "int8", "column id is int8, expected uuid"),
    ],
)
def test_check_names_the_key_type_a_query_misses(
    codec: KeyCodec, params: list[str], key: str, problem: str | None
) -> None:
    assert compare(MESSAGES, params, _message_columns(key), codec) == problem


def test_the_setting_names_its_values() -> None:
    assert load_settings().keys() is UUID_KEYS
    assert load_settings(key_type="bigint").token_options().keys is BIGINT_KEYS
    with pytest.raises(ConfigurationError, match="REALTIME_KEY_TYPE"):
        load_settings(key_type="int")
