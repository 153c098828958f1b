"""Body limits of the REST API, for :class:`~realtime_dispatch.edge.request_guard.RequestGuard`:
each the largest valid request of its routes, compactly encoded, with room to spare.

* A message (send, edit): 4,000 characters of body or card text, a file's three 255-character
  fields and a 64-character ``clientMessageId``, each character at worst a 12-byte escaped
  surrogate pair: under 60 KB, so 64 KiB.
* Everything else (a chat with 200 members and a 200-character title is the largest, ~10 KB):
  16 KiB.
"""

from __future__ import annotations

from realtime_dispatch.edge.request_guard import DEFAULT_MAX_BODY_BYTES, BodyRule

MESSAGE_MAX_BODY_BYTES = 64 * 1024

API_BODY_RULES = (
    BodyRule(
        "/api/chats/[^/]+/messages(/[^/]+)?",
        MESSAGE_MAX_BODY_BYTES,
        "token",
        frozenset({"POST", "PATCH"}),
    ),
    BodyRule("/api/.*", DEFAULT_MAX_BODY_BYTES, "token"),
)
