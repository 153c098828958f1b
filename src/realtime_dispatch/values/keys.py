"""The type of the owner's keys (``REALTIME_KEY_TYPE``): ``uuid`` (the default, the reference
messenger's), ``bigint`` (Django's ``BigAutoField``, Rails, Laravel, most JPA schemas) or
``text``. One :class:`KeyCodec` per type says everything that differs between them: the SQL type
of the outbox's key columns, the parameter and column types the manifest's queries must have,
how a key is read from a token claim or a client's JSON argument, and how it is written to
JSON (a number for ``bigint``, a string otherwise, so that a push's ids equal what the owner's
own REST API shows). Groups are ``chat:{key}`` / ``user:{key}`` with the key's decimal or text
spelling whatever the type.

Keys travel as the driver's values (``UUID``, ``int``, ``str``) from the outbox row to the
payload; nothing is converted on the way except at these edges. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias
from uuid import UUID

Key: TypeAlias = UUID | int | str
"""A key as the database driver gives it for the configured type."""

VARIABLE = "REALTIME_KEY_TYPE"
PLACEHOLDER = "@key_type@"
"""Where a migration's SQL names the key type (:func:`realtime_dispatch.outbox.migrate`)."""

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
MAX_TEXT_KEY = 128  # a group name (``chat:`` + key) stays far below the hub's 200
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")


def _claim_uuid(value: object) -> UUID:
    """Only the canonical spelling (lower case, hyphenated): one user, one group name."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    key = UUID(value)
    if str(key) != value:  # `{…}`, `urn:uuid:…`, upper case, no hyphens
        raise ValueError("not the canonical form")
    return key


def _json_uuid(value: object) -> UUID:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return UUID(value)


def _bigint(value: object) -> int:
    """A JSON integer, or a decimal integer string (no sign but ``-``, no leading zeros): what a
    token carries for Django's integer user id either way."""
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError("not a decimal integer")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError("not an integer")
    if not BIGINT_MIN <= value <= BIGINT_MAX:
        raise ValueError("out of the bigint range")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    if not 0 < len(value) <= MAX_TEXT_KEY or not value.isprintable():
        raise ValueError(f"not 1 to {MAX_TEXT_KEY} printable characters")
    return value


@dataclass(frozen=True, slots=True)
class KeyCodec:
    name: str
    """The setting's value, and the SQL type of the outbox's key columns."""
    param_type: str
    """The type of a ``$1`` holding one key, as asyncpg names it."""
    column_types: frozenset[str]
    """The types a key column of a manifest query may have (asyncpg's names)."""
    from_claim: Callable[[object], Key]
    """A token's user claim → the key; ValueError when it is not one of this type."""
    from_json: Callable[[object], Key]
    """A client's JSON argument → the key (more lenient than a claim for uuid: any spelling)."""
    to_json: Callable[[Key], str | int]
    """The key as the wire carries it: ``str`` for uuid and text, the int itself for bigint
    (builtins, so the uuid path costs what ``str(key)`` did)."""
    described: str
    """What a key of this type is, for a refusal's reason (a token's user claim)."""

    @property
    def array_type(self) -> str:
        """The type of a ``$1`` holding the batch's keys, as asyncpg names it."""
        return f"{self.param_type}[]"

    def __str__(self) -> str:
        return self.name


UUID_KEYS = KeyCodec(
    "uuid",
    "uuid",
    frozenset({"uuid"}),
    _claim_uuid,
    _json_uuid,
    str,
    "a UUID, lowercase and hyphenated",
)
BIGINT_KEYS = KeyCodec(
    "bigint",
    "int8",
    frozenset({"int2", "int4", "int8"}),
    _bigint,
    _bigint,
    int,
    "a decimal integer in the bigint range, a JSON number or string",
)
TEXT_KEYS = KeyCodec(
    "text",
    "text",
    frozenset({"text", "varchar"}),
    _text,
    _text,
    str,
    f"1 to {MAX_TEXT_KEY} printable characters",
)

KEY_TYPES: dict[str, KeyCodec] = {
    codec.name: codec for codec in (UUID_KEYS, BIGINT_KEYS, TEXT_KEYS)
}


def key_codec(name: str) -> KeyCodec:
    """The codec of ``name`` (``uuid``, ``bigint``, ``text``); KeyError for another."""
    return KEY_TYPES[name]
