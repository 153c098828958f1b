"""Revoked users, as the verifier sees them: :class:`Revocations`, an in-memory view of
``messenger.realtime_revocations`` that a listener keeps current (the hub's, from
``NOTIFY realtime_revocation``). Pure: no I/O here; the SQL is in :mod:`.revocation_store`.

A revocation of a user refuses every token of that user issued before it (``iat`` earlier than
the revocation, or no ``iat`` at all); tokens issued after it are accepted again, so an identity
provider can go on serving a user whose old tokens were cut. Lifting it removes the row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import orjson

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec


@dataclass(frozen=True, slots=True)
class Revocation:
    user_id: Key
    revoked_at: datetime

    def as_json(self) -> dict[str, str]:
        return {"userId": str(self.user_id), "revokedAt": self.revoked_at.isoformat()}

    def as_json_with(self, keys: KeyCodec) -> dict[str, object]:
        """:meth:`as_json` with the user id as ``keys`` write it (a number for bigint)."""
        return {**self.as_json(), "userId": keys.to_json(self.user_id)}


@dataclass(frozen=True, slots=True)
class RevocationChange:
    """One notification: ``revoked_at`` (Unix seconds) set, or None when lifted."""

    user_id: Key
    revoked_at: float | None


class Revocations:
    """User → when they were revoked (Unix seconds)."""

    __slots__ = ("_at", "_during_load")

    def __init__(self) -> None:
        self._at: dict[Key, float] = {}
        self._during_load: list[RevocationChange] | None = None

    def __len__(self) -> int:
        return len(self._at)

    def begin_load(self) -> None:
        """A reload of the whole table starts (after LISTEN): changes notified from now on are
        applied and also kept, to be applied again over the loaded rows, which may predate
        them."""
        self._during_load = []

    def finish_load(self, items: Iterable[Revocation]) -> None:
        changes, self._during_load = self._during_load or [], None
        self._at = {item.user_id: item.revoked_at.timestamp() for item in items}
        for change in changes:
            self._set(change)

    def cancel_load(self) -> None:
        self._during_load = None

    def apply(self, change: RevocationChange) -> None:
        if self._during_load is not None:
            self._during_load.append(change)
        self._set(change)

    def _set(self, change: RevocationChange) -> None:
        if change.revoked_at is None:
            self._at.pop(change.user_id, None)
        else:
            self._at[change.user_id] = change.revoked_at

    def users(self) -> frozenset[Key]:
        return frozenset(self._at)

    def refuses(self, identity: Identity) -> bool:
        """True when ``identity``'s token was issued before its user's revocation."""
        revoked_at = self._at.get(identity.user_id)
        if revoked_at is None:
            return False
        return identity.issued_at is None or identity.issued_at < revoked_at


def parse_change(payload: str, keys: KeyCodec = UUID_KEYS) -> RevocationChange | None:
    """The trigger's payload ``{"userId": …, "revokedAt": <Unix seconds> | null}`` (the user id
    of type ``keys``); None when it is not one."""
    try:
        value = orjson.loads(payload)
        user_id = keys.from_json(value["userId"])
        at = value["revokedAt"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if at is not None and not isinstance(at, int | float):
        return None
    return RevocationChange(user_id, None if at is None else float(at))
