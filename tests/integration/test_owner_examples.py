"""``examples/owner_*.py`` run against the real database and the real pipeline: each writes a
message and its push intent in one transaction, the dispatcher pushes it, and an SDK client sees
it live; a transaction that fails after the writes leaves neither row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import asyncpg
import psycopg
import pytest
from examples import owner_asyncpg, owner_psycopg, owner_sqlalchemy
from sqlalchemy import create_engine

from realtime_dispatch.client import MessageReceived
from support.procs import wait_until
from tests.integration.client_stack import messenger_stack

Poster = Callable[[str, UUID, UUID, str], Awaitable[Any]]


async def _asyncpg(url: str, chat: UUID, sender: UUID, body: str) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await owner_asyncpg.post_message(conn, chat, sender, body)
    finally:
        await conn.close()


async def _psycopg(url: str, chat: UUID, sender: UUID, body: str) -> Any:
    def run() -> Any:
        with psycopg.connect(url) as conn:
            return owner_psycopg.post_message(conn, chat, sender, body)

    return await asyncio.to_thread(run)


async def _sqlalchemy(url: str, chat: UUID, sender: UUID, body: str) -> Any:
    return await asyncio.to_thread(owner_sqlalchemy.post_message, url, chat, sender, body)


POSTERS: dict[str, Poster] = {"asyncpg": _asyncpg, "psycopg": _psycopg, "sqlalchemy": _sqlalchemy}


@pytest.mark.parametrize("driver", sorted(POSTERS))
async def test_owner_example_message_reaches_the_client(
    driver: str, database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool) as stack, stack.client(stack.bob) as bob:
        chat = await bob.rest.create_chat("owners", [stack.alice])
        await bob.track(chat)
        await bob.wait_connected()
        await bob.settled()  # the connect's own resume/resync is done: the test starts from here
        live: list[MessageReceived] = []
        bob.on(MessageReceived, live.append)
        posted = await POSTERS[driver](database_url, chat, stack.alice, f"from {driver}")
        await wait_until(lambda: len(live) == 1)
    [event] = live
    assert (event.message_id, event.seq, event.body) == (posted.message_id, 1, f"from {driver}")
    status = await pool.fetchval(
        "SELECT status FROM messenger.realtime_outbox WHERE id = $1", posted.outbox_id
    )
    assert status == "Done"


async def _fail_asyncpg(url: str, chat: UUID, sender: UUID) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await owner_asyncpg.insert_message(conn, chat, sender, "never")
            raise RuntimeError("the owner's command failed after its writes")
    finally:
        await conn.close()


def _fail_psycopg(url: str, chat: UUID, sender: UUID) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        owner_psycopg.insert_message(conn, chat, sender, "never")
        raise RuntimeError("the owner's command failed after its writes")


def _fail_sqlalchemy(url: str, chat: UUID, sender: UUID) -> None:
    engine = create_engine(owner_sqlalchemy.engine_url(url))
    try:
        with engine.begin() as conn:
            owner_sqlalchemy.insert_message(conn, chat, sender, "never")
            raise RuntimeError("the owner's command failed after its writes")
    finally:
        engine.dispose()


async def test_a_failed_owner_transaction_leaves_neither_message_nor_push(
    database_url: str, pool: asyncpg.Pool
) -> None:
    chat, sender = UUID(int=42), UUID(int=7)
    await pool.execute(
        "INSERT INTO messenger.chats (id, title, created_by) VALUES ($1, 't', $2)", chat, sender
    )
    with pytest.raises(RuntimeError):
        await _fail_asyncpg(database_url, chat, sender)
    for fail in (_fail_psycopg, _fail_sqlalchemy):
        with pytest.raises(RuntimeError):
            await asyncio.to_thread(fail, database_url, chat, sender)
    assert await pool.fetchval("SELECT count(*) FROM messenger.messages") == 0
    assert await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox") == 0
    assert await pool.fetchval("SELECT last_seq FROM messenger.chats") == 0
