"""Revocations reach this replica: :class:`RevocationWatch` rides on the membership feed's
listening connection (``LISTEN realtime_revocation``), applies each change to the verifier's
:class:`~realtime_dispatch.auth.revocations.Revocations` and has the hub close the user's
connections. After every (re)connect of that listener, and when the hub starts, it reloads the
whole table: notifications sent while it was away are not lost, only late."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import structlog

from realtime_dispatch.auth.revocation_store import load_revocations
from realtime_dispatch.auth.revocations import Revocations, parse_change
from realtime_dispatch.delivery.channels import REVOCATION_CHANNEL
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

log = structlog.get_logger(__name__)


class RevocationWatch:
    channel = REVOCATION_CHANNEL

    def __init__(
        self, state: Revocations, cut: Callable[[Key], object], keys: KeyCodec = UUID_KEYS
    ) -> None:
        self._state = state
        self._cut = cut
        self._keys = keys

    def notified(self, payload: str) -> None:
        change = parse_change(payload, self._keys)
        if change is None:
            log.warning("revocation_notification_invalid")
            return
        self._state.apply(change)
        if change.revoked_at is not None:
            self._cut(change.user_id)

    async def resync(self, pool: asyncpg.Pool) -> None:
        self._state.begin_load()
        try:
            loaded = await load_revocations(pool)
        except BaseException:
            self._state.cancel_load()
            raise
        self._state.finish_load(loaded)
        for user_id in self._state.users():
            self._cut(user_id)
        log.info("revocations_loaded", users=len(self._state))
