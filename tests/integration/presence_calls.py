"""Presence on the wire for the hub's tests: ``WatchPresence`` invocations and their answers,
and a member taken out of a chat behind the hub's back, then hinted."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import orjson


def invoke(invocation_id: str | None, target: str, *arguments: object) -> dict[str, object]:
    """A hub invocation record (a non-blocking one when ``invocation_id`` is ``None``)."""
    record: dict[str, object] = {"type": 1, "target": target, "arguments": list(arguments)}
    if invocation_id is not None:
        record["invocationId"] = invocation_id
    return record


def watch(invocation_id: str, ids: list[object]) -> dict[str, object]:
    return invoke(invocation_id, "WatchPresence", [str(i) for i in ids])


async def watched(client: Any, invocation_id: str, ids: list[object]) -> Any:
    """``WatchPresence(ids)`` from a raw client; the result of its completion."""
    await client.send_record(watch(invocation_id, ids))
    return (await client.next_of([3]))["result"]


async def leave_quietly_then_hint(pool: asyncpg.Pool, chat: UUID, user: UUID) -> None:
    """``user`` made inactive in ``chat`` by a plain UPDATE (no trigger tells the hub), then a
    membership hint for the pair (no ``active``: the hub reads the user's chats again)."""
    await pool.execute(
        "UPDATE messenger.participants SET active = false WHERE chat_id = $1 AND user_id = $2",
        chat,
        user,
    )
    hint = orjson.dumps({"chatId": str(chat), "userId": str(user)}).decode()
    await pool.execute("SELECT pg_notify('realtime_membership', $1)", hint)
