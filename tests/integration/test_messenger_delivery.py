"""All 26 kinds end to end: command → outbox → real dispatcher → real hub → real WebSocket
clients. Each event reaches exactly its group's members; everyone else (dave, in no chat and no
call; eve, once removed; carol, for calls she is not in) receives nothing."""

from __future__ import annotations

import asyncpg
import pytest

from realtime_dispatch.outbox.model import RealtimeDispatchKind
from tests.integration.messenger_scenario import STEPS
from tests.integration.messenger_world import world


@pytest.mark.parametrize("path", ["in-process", "backplane"])
async def test_every_kind_reaches_its_group_and_nobody_else(
    database_url: str, pool: asyncpg.Pool, path: str, request: pytest.FixtureRequest
) -> None:
    """``in-process`` as ``serve`` runs it; ``backplane``: the worker's topology (a Redis
    publisher, the hub subscribed). In both the runner's membership marks stand in for most of
    the hub's barriers; the members added and removed along the way (eve) must still get
    exactly what they should."""
    backplane_url = request.getfixturevalue("redis_url") if path == "backplane" else None
    async with world(database_url, pool, backplane_url=backplane_url) as w:
        for step in STEPS:
            await w.play(step)
        await w.assert_quiet()
        registry = w.hub.hub.metrics_registry
        barriers = {
            kind: registry.get_sample_value(
                "messenger_realtime_hub_membership_barriers_total", {"kind": kind}
            )
            for kind in ("marked", "round_trip")
        }
    assert barriers["marked"], barriers  # the marks were used, not only the round trips
    events = {r.event for r in w.received}
    assert events == {k.event_name for k in RealtimeDispatchKind}
    assert not [r for r in w.received if r.user == "dave"]
    eve = [(r.event, r.payload.get("eventKind")) for r in w.received if r.user == "eve"]
    assert eve == [("chat_updated", "MemberAdded")]  # then removed: nothing more of the chat
    carol_calls = {r.event for r in w.received if r.user == "carol" and r.event.startswith("call")}
    assert carol_calls == {"call_invited", "call_declined", "call_missed"}  # her calls only
    outbox = await pool.fetch("SELECT status, attempts FROM messenger.realtime_outbox")
    assert {(r["status"], r["attempts"]) for r in outbox} == {("Done", 1)}
