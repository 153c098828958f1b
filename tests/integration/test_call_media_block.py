"""A blocked party of a 1:1 call gets no join credentials, however the event is read (issue 47,
point 3; RELIABILITY H31): Alice calls Bob, Bob answers, Bob blocks Alice. The call stays
Active (a block ends no call: the blocked user is not told of it, and the blocker may hang up);
what ends is the blocked party's media access: ``POST /api/calls/{id}/media`` refuses her, and
the ``call_invited`` rows carry no ``media`` for either party, whether pushed after the block,
retried after it, or replayed by ``GET /api/sync``. Lifted, media again."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg
import pytest

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.messenger import blacklist, calls, media_join
from realtime_dispatch.messenger.refusals import Forbidden
from tests.fakes import RecordingPublisher
from tests.integration.messenger_world import MEDIA
from tests.integration.support import make_due, make_stack
from tests.integration.sync_client import sync_api


def _invited(publisher: RecordingPublisher, call: UUID) -> dict[str, object]:
    """The ``media`` of ``call``'s ``call_invited`` pushes, by the user they went to."""
    return {
        p.group.removeprefix("user:"): p.payload.get("media")
        for p in publisher.pushes
        if p.target == "call_invited" and p.payload["callId"] == str(call)
    }


async def _answered_call(pool: asyncpg.Pool) -> tuple[UUID, UUID, UUID]:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        call = await calls.start_call(conn, caller=alice, callee=bob)
        await calls.answer_call(conn, call_id=call, actor=bob)
    return alice, bob, call


async def _block(pool: asyncpg.Pool, owner: UUID, blocked: UUID) -> None:
    async with pool.acquire() as conn:
        await blacklist.block_user(conn, owner=owner, blocked=blocked)


async def test_the_push_after_a_block_carries_no_media(pool: asyncpg.Pool) -> None:
    alice, bob, call = await _answered_call(pool)
    await _block(pool, bob, alice)
    stack = make_stack(pool, builder=default_payload_builder(MEDIA))
    await stack.dispatcher.run_pass()
    media = _invited(stack.publisher, call)
    assert set(media) == {str(alice), str(bob)}
    assert media == {str(alice): None, str(bob): None}
    status = await pool.fetchval("SELECT status FROM messenger.call_sessions WHERE id = $1", call)
    assert status == "Active"  # the block ends media access, not the call
    minter = MediaMinter(MEDIA)
    async with pool.acquire() as conn:
        with pytest.raises(Forbidden):
            await media_join.call_media(conn, minter, call_id=call, user=alice)
        assert (await media_join.call_media(conn, minter, call_id=call, user=bob)).access_token


async def test_a_retry_after_the_block_carries_no_media(pool: asyncpg.Pool) -> None:
    """The first push fails (the hub away) before the block; its retry comes after it."""
    alice, bob, call = await _answered_call(pool)
    down = RecordingPublisher(fail=lambda p: HubUnavailable("down"))
    failing = make_stack(pool, publisher=down, builder=default_payload_builder(MEDIA))
    await failing.dispatcher.run_pass()
    assert down.calls
    assert not down.pushes
    await _block(pool, bob, alice)
    await make_due(pool)
    stack = make_stack(pool, builder=default_payload_builder(MEDIA))
    await stack.dispatcher.run_pass()
    assert _invited(stack.publisher, call) == {str(alice): None, str(bob): None}


async def test_a_sync_replay_after_the_block_carries_no_media(pool: asyncpg.Pool) -> None:
    """The issue's attack: Alice replays ``GET /api/sync`` from a cursor before the call;
    before the block she gets fresh credentials, after it none (nor does Bob, who asks
    ``/media``); lifted, media again."""
    async with sync_api(pool) as (sync, _):
        alice, bob = uuid4(), uuid4()
        since = {user: await sync.cursor(user) for user in (alice, bob)}
        async with pool.acquire() as conn:
            call = await calls.start_call(conn, caller=alice, callee=bob)
            await calls.answer_call(conn, call_id=call, actor=bob)

        async def replayed(user: UUID) -> object:
            events, _ = await sync.drain(user, since[user])
            [invited] = [e for e in events if e["target"] == "call_invited"]
            assert invited["payload"]["callId"] == str(call)
            return invited["payload"].get("media")

        assert await replayed(alice)  # the control: a live call's replay mints
        await _block(pool, bob, alice)
        assert await replayed(alice) is None
        assert await replayed(bob) is None
        async with pool.acquire() as conn:
            await blacklist.unblock_user(conn, owner=bob, blocked=alice)
        assert await replayed(alice)


async def test_a_block_by_the_caller_withholds_too(pool: asyncpg.Pool) -> None:
    """Either direction: the caller blocking the callee withholds the callee's credentials."""
    alice, bob, call = await _answered_call(pool)
    await _block(pool, alice, bob)
    stack = make_stack(pool, builder=default_payload_builder(MEDIA))
    await stack.dispatcher.run_pass()
    assert _invited(stack.publisher, call) == {str(alice): None, str(bob): None}
