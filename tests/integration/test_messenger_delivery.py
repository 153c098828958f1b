"""All 26 kinds end to end: command → outbox → real dispatcher → real hub → real WebSocket
clients. Each event reaches exactly its group's members; everyone else (dave, in no chat and no
call; eve, once removed; carol, for calls she is not in) receives nothing."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.outbox.model import RealtimeDispatchKind
from tests.integration.messenger_scenario import STEPS
from tests.integration.messenger_world import world


async def test_every_kind_reaches_its_group_and_nobody_else(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with world(database_url, pool) as w:
        for step in STEPS:
            await w.play(step)
        await w.assert_quiet()
    events = {r.event for r in w.received}
    assert events == {k.event_name for k in RealtimeDispatchKind}
    assert not [r for r in w.received if r.user == "dave"]
    eve = [(r.event, r.payload.get("eventKind")) for r in w.received if r.user == "eve"]
    assert eve == [("chat_updated", "MemberAdded")]  # then removed: nothing more of the chat
    carol_calls = {r.event for r in w.received if r.user == "carol" and r.event.startswith("call")}
    assert carol_calls == {"call_invited", "call_declined", "call_missed"}  # her calls only
    outbox = await pool.fetch("SELECT status, attempts FROM messenger.realtime_outbox")
    assert {(r["status"], r["attempts"]) for r in outbox} == {("Done", 1)}
