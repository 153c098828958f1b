"""``Typing(chatId)`` over a real socket, memberships from PostgreSQL: the other members get
``user_typing``, the typist's own connections and non-members do not, the interval drops the
repeats, a removed member stops getting it, and nothing is written to the outbox."""

from __future__ import annotations

import asyncio
import uuid

import orjson

from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.hub.signals.typing_signal import BLOCKED
from realtime_dispatch.messenger.access import is_blocked_in_chat
from realtime_dispatch.messenger.blacklist import block_user, unblock_user
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import hub_settings, options_for, raw_client, running_hub
from tests.integration.chat_pairs import alice_bob_and_a_chat


def _typing(invocation_id: str | None, *arguments: object) -> dict[str, object]:
    record: dict[str, object] = {"type": 1, "target": "Typing", "arguments": list(arguments)}
    if invocation_id is not None:
        record["invocationId"] = invocation_id
    return record


async def _outbox_rows(pool) -> int:
    return await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox")


async def test_typing_reaches_other_members_only(database_url, pool):
    alice, bob, carol, eve = (uuid.uuid4() for _ in range(4))
    async with pool.acquire() as conn:
        chat = await create_chat(conn, creator=alice, title="t", members=[bob, carol])
    settings = hub_settings()
    async with (
        running_hub(
            settings,
            dsn=database_url,
            pool=pool,
            options=options_for(settings, typing_interval=0.5),
        ) as hub,
        raw_client(hub, make_token(alice)) as a1,
        raw_client(hub, make_token(alice)) as a2,
        raw_client(hub, make_token(bob)) as b,
        raw_client(hub, make_token(carol)) as c,
        raw_client(hub, make_token(eve)) as e,
    ):
        rows = await _outbox_rows(pool)
        await a1.send_record(_typing("1", str(chat)))
        assert await a1.next_of([3]) == {"type": 3, "invocationId": "1"}
        for member in (b, c):
            [record] = await member.invocations(1)
            assert record["target"] == "user_typing"
            payload = record["arguments"][0]
            assert payload["chatId"] == str(chat)
            assert payload["userId"] == str(alice)
            assert payload["expiresAt"].endswith("Z")
        # Inside the interval: accepted, dropped.
        await a1.send_record(_typing("2", str(chat)))
        assert await a1.next_of([3]) == {"type": 3, "invocationId": "2"}
        await b.assert_silent(0.2)
        await a2.assert_silent(0.1)  # the typist's own other connection
        await a1.assert_silent(0.1)
        # A non-member, an unknown chat, bad arguments: an error, nothing sent.
        await e.send_record(_typing("3", str(chat)))
        assert "not a member" in (await e.next_of([3]))["error"]
        await e.send_record(_typing("4", str(uuid.uuid4())))
        assert "not a member" in (await e.next_of([3]))["error"]
        for index, bad in enumerate([[], [None], [{"x": 1}], ["a", "b"]]):
            await e.send_record(_typing(f"b{index}", *bad))
            assert "one argument" in (await e.next_of([3]))["error"]
        await b.assert_silent(0.2)
        assert await _outbox_rows(pool) == rows  # the ephemeral path writes nothing
        counts = hub.hub.metrics.typing
        assert counts.labels("sent")._value.get() == 1
        assert counts.labels("throttled")._value.get() == 1
        assert counts.labels("refused")._value.get() == 6


async def test_removed_member_stops_getting_typing(pool, start_hub):
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with (
        start_hub(typing_interval=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
        raw_client(hub, make_token(bob)) as b,
    ):
        await a.send_record(_typing(None, str(chat)))
        assert (await b.invocations(1))[0]["target"] == "user_typing"
        async with pool.acquire() as conn:
            await set_participant(conn, chat_id=chat, user_id=bob, active=False)
        [bob_connection] = [cid for cid, c in hub.hub.connections.items() if c.user_id == bob]
        await wait_until(lambda: chat_group(chat) not in hub.hub.registry.groups_of(bob_connection))
        await a.send_record(_typing("1", str(chat)))
        assert await a.next_of([3]) == {"type": 3, "invocationId": "1"}
        await b.assert_silent(0.3)
        # ...and bob, no longer a member, is refused.
        await b.send_record(_typing("2", str(chat)))
        assert "not a member" in (await b.next_of([3]))["error"]


async def test_flood_of_typing_costs_one_fan_out(database_url, pool):
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    settings = hub_settings()
    async with (
        running_hub(settings, dsn=database_url, pool=pool) as hub,
        raw_client(hub, make_token(alice)) as a,
        raw_client(hub, make_token(bob)) as b,
    ):
        record = _typing(None, str(chat))
        text = (orjson.dumps(record).decode() + "\x1e") * 1000
        for start in range(0, len(text), 30_000):  # under the frame limit
            await a.send(text[start : start + 30_000])
        assert (await b.invocations(1))[0]["target"] == "user_typing"
        await b.assert_silent(0.3)
        await wait_until(lambda: hub.hub.metrics.typing.labels("throttled")._value.get() == 999)
        assert len(hub.hub.methods.typing.gate) == 1


async def test_typing_follows_the_block_rule_of_sending(pool, start_hub):
    """Bob blocks Alice in their 1:1 chat: her ``Typing`` is refused as her messages are
    (403's text) and Bob gets nothing; in a group that never came down to the two of them the
    block does not silence her (a send goes through there too); lifted, she is heard again."""
    alice, bob, carol = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        direct = await create_chat(conn, creator=alice, title="d", members=[bob])
        group = await create_chat(conn, creator=alice, title="g", members=[bob, carol])
    async with (
        start_hub(typing_interval=0.05) as hub,
        raw_client(hub, make_token(alice)) as a,
        raw_client(hub, make_token(bob)) as b,
    ):
        await a.send_record(_typing("1", str(direct)))
        assert await a.next_of([3]) == {"type": 3, "invocationId": "1"}
        assert (await b.invocations(1))[0]["target"] == "user_typing"
        async with pool.acquire() as conn:
            await block_user(conn, owner=bob, blocked=alice)
        await asyncio.sleep(0.1)  # past the interval
        await a.send_record(_typing("2", str(direct)))
        assert (await a.next_of([3]))["error"] == BLOCKED
        await asyncio.sleep(0.1)
        await a.send_record(_typing(None, str(direct)))  # unanswered: refused all the same
        await b.assert_silent(0.3)
        await a.send_record(_typing("3", str(group)))  # the group: not silenced
        assert await a.next_of([3]) == {"type": 3, "invocationId": "3"}
        [record] = await b.invocations(1)
        assert record["arguments"][0]["chatId"] == str(group)
        # A message in the 1:1 chat is refused by the same rule.
        async with pool.acquire() as conn:
            assert await is_blocked_in_chat(conn, chat_id=direct, actor=alice)
            assert not await is_blocked_in_chat(conn, chat_id=group, actor=alice)
            await unblock_user(conn, owner=bob, blocked=alice)
        await asyncio.sleep(0.1)
        await a.send_record(_typing("4", str(direct)))
        assert await a.next_of([3]) == {"type": 3, "invocationId": "4"}
        assert (await b.invocations(1))[0]["arguments"][0]["chatId"] == str(direct)
        assert hub.hub.metrics.typing.labels("refused")._value.get() == 2
