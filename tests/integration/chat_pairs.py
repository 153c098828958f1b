"""Two new users and a chat between them, the start of many of the hub's tests."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg

from realtime_dispatch.messenger.commands import create_chat
from tests.hub_fixtures import create_shared_chat


async def alice_bob_and_a_chat(
    pool: asyncpg.Pool, *, bob_member: bool = True, taken_part: bool = False
) -> tuple[UUID, UUID, UUID]:
    """Two new users, Alice and Bob, and a chat titled "t" that Alice created: Bob is a member
    (unless ``bob_member`` is false); ``taken_part``: each member sent a message there (presence
    shows through a chat its members took part in)."""
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        create = create_shared_chat if taken_part else create_chat
        chat = await create(conn, creator=alice, title="t", members=[bob] if bob_member else [])
    return alice, bob, chat
