"""The PostgreSQL NOTIFY channels shared by the triggers and statements that announce and the
listeners that wake on them. The names are a contract with the migrations' SQL."""

from __future__ import annotations

OUTBOX_CHANNEL = "realtime_outbox"
"""Fired once per statement that inserts into ``messenger.realtime_outbox`` (migration trigger);
the dispatcher's runners wake on it. A hint only: polling still runs."""

MEMBERSHIP_CHANNEL = "realtime_membership"
"""Fired inside every transaction that changes who is an active member of a chat (payload
``{chatId, userId, active}``), and by the sharded publisher's barrier (``{"barrier": token}``);
the hubs' membership feeds listen to it."""

REVOCATION_CHANNEL = "realtime_revocation"
"""Fired for every change of ``messenger.realtime_revocations`` (payload ``{userId, revokedAt}``,
``revokedAt`` in Unix seconds or null when lifted); the hubs close the user's connections."""
