"""The reference messenger's blacklist rule in a chat, as SQL: the one text that the messenger's
commands (``messenger.access``, ``messenger.messages``' send) and the hub's live signals over
the reference schema (``hub.signals.hub_signals``, off over an adopter's manifest) ask.

A user is blocked in a chat when a user who blocked them is an active member of it and the
chat has been a chat of just the two of them at some moment since the block was placed
(``messenger.blacklist_chats``, kept by the triggers of migration 0015), or is one now.
"""

from __future__ import annotations

BLOCKED_IN_CHAT = """
EXISTS (SELECT 1 FROM messenger.blacklist b
        JOIN messenger.participants o
          ON o.chat_id = $1 AND o.user_id = b.owner_user_id AND o.active
        WHERE b.blocked_user_id = $2 AND b.removed_at IS NULL
          AND (EXISTS (SELECT 1 FROM messenger.blacklist_chats m
                       WHERE m.chat_id = $1 AND m.blacklist_id = b.id)
               OR (SELECT count(*) FROM messenger.participants a
                   WHERE a.chat_id = $1 AND a.active) = 2))
"""
"""A boolean expression: whether the user $2 is blocked in the chat $1."""
BLOCKED_IN_CHAT_SQL = f"SELECT {BLOCKED_IN_CHAT}"
"""The same as a statement of its own."""
