"""How user ids travel in the hub's own payloads (``user_typing``, ``presence_changed``) and how
the ids a client sends are read back: one place, so a change of key type touches only it."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.values.json_types import JsonValue
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec


def user_id_json(user_id: Key, keys: KeyCodec = UUID_KEYS) -> JsonValue:
    """A user id as a payload carries it: a number for bigint keys, a string otherwise."""
    return keys.to_json(user_id)


def parse_key(raw: object, keys: KeyCodec) -> Key | None:
    """A key of ``keys``' type a client sent (or an envelope carried); None when not one."""
    if isinstance(raw, str) and len(raw) > 200:
        return None
    try:
        return keys.from_json(raw)
    except ValueError:
        return None


def parse_user_id(raw: object) -> UUID | None:
    """A user id a client sent (or a backplane envelope carried); None when it is not one."""
    if not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        return UUID(raw)
    except ValueError:
        return None
