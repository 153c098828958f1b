"""How user ids travel in the hub's own payloads (``user_typing``, ``presence_changed``) and how
the ids a client sends are read back: one place, so a change of key type touches only it."""

from __future__ import annotations

from uuid import UUID

from realtime_dispatch.push import JsonValue


def user_id_json(user_id: UUID) -> JsonValue:
    """A user id as a payload carries it."""
    return str(user_id)


def parse_user_id(raw: object) -> UUID | None:
    """A user id a client sent (or a backplane envelope carried); None when it is not one."""
    if not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        return UUID(raw)
    except ValueError:
        return None
