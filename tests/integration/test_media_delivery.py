"""Media join at delivery: ``call_invited``, ``conference_started`` and ``conference_invited``
arrive at the client with a room token that verifies with the configured Jitsi secret and TURN
credentials that verify with the TURN secret's HMAC; neither the tokens nor the secrets are in
any table or any log line."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from realtime_dispatch.auth.media import MediaOptions
from tests.integration.messenger_scenario import STEPS
from tests.integration.messenger_world import (
    JITSI_SECRET,
    TURN_SECRET,
    World,
    verify_media,
    world,
)

MEDIA_STEPS = ("call alice→bob", "start conference", "invite bob")
INVITES = ("call_invited", "conference_started", "conference_invited")


async def test_join_tokens_are_valid_at_the_client_and_stored_nowhere(
    database_url: str, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with capture_logs() as events:
        async with world(database_url, pool) as w:
            for step in STEPS:
                if step.name in MEDIA_STEPS:
                    await w.play(step)
            await w.assert_quiet()
    ctx = w.ctx
    invites = {r.user: r.payload for r in w.received if r.event == "call_invited"}
    assert set(invites) == {"alice", "bob"}  # each party gets credentials minted for them
    for name, payload in invites.items():
        claims = verify_media(payload["media"], subject=str(ctx.users[name]))
        assert claims["context"] == {"user": {"id": str(ctx.users[name])}}
    conference = [r for r in w.received if r.event.startswith("conference_")]
    assert {r.event for r in conference} == {"conference_started", "conference_invited"}
    assert {r.user for r in conference} == {"alice", "bob", "carol"}  # the chat's members
    for r in conference:
        claims = verify_media(r.payload["media"], subject=str(ctx.ids["chat"]))
        assert claims["context"] == {"group": str(ctx.ids["chat"])}

    secrets = {JITSI_SECRET, TURN_SECRET}
    for r in w.received:
        media = r.payload.get("media")
        if media:
            secrets.add(media["accessToken"])
            secrets.update(ice["credential"] for ice in media["iceServers"])
            # The signature part alone must not leak either.
            secrets.add(media["accessToken"].rsplit(".", 1)[1])
    tables = await pool.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'messenger'"
    )
    assert len(tables) >= 12
    for t in tables:
        rows = await pool.fetch(f'SELECT x::text AS line FROM messenger."{t["table_name"]}" x')
        dump = "\n".join(r["line"] for r in rows)
        assert not [s for s in secrets if s in dump], t["table_name"]
    assert events, "structlog events were captured"
    logged = repr(events) + caplog.text
    assert not [s for s in secrets if s in logged]


def _no_media(_ctx: object, _who: str, payload: dict[str, Any]) -> None:
    assert "media" not in payload or payload["media"] is None, payload


def _unconfigured(w: World, kind: str) -> float:
    assert w.metrics is not None
    sample = w.metrics.registry.get_sample_value(
        "messenger_realtime_media_unconfigured_total", {"kind": kind}
    )
    return sample or 0.0


async def test_invites_without_media_secrets_are_said_once_and_counted(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """No Jitsi secret: the invites still go out (without ``media``), the process says so once
    at start, and each such push is counted by kind."""
    with capture_logs() as events:
        async with world(database_url, pool, MediaOptions()) as w:
            started = [e for e in events if e["event"] == "media_unconfigured"]
            for step in STEPS:
                if step.name in MEDIA_STEPS:
                    # The scenario's checks expect media; here only its absence is checked.
                    await w.play(dataclasses.replace(step, check=_no_media))
            await w.assert_quiet()
    assert len(started) == 1
    assert started[0]["log_level"] == "warning"
    assert started[0]["kinds"] == ["CallInvited", "ConferenceInvited", "ConferenceStarted"]
    assert len([e for e in events if e["event"] == "media_unconfigured"]) == 1
    pushed = [r for r in w.received if r.event in INVITES]
    assert {r.event for r in pushed} == set(INVITES)
    assert all(r.payload.get("media") is None for r in pushed)
    # One count per push (a group push once, however many members receive it).
    assert _unconfigured(w, "CallInvited") == 2  # one to each party
    assert _unconfigured(w, "ConferenceStarted") == 1
    assert _unconfigured(w, "ConferenceInvited") == 1


async def test_invites_with_media_secrets_count_nothing(
    database_url: str, pool: asyncpg.Pool
) -> None:
    with capture_logs() as events:
        async with world(database_url, pool) as w:
            for step in STEPS:
                if step.name == "call alice→bob":
                    await w.play(step)
    assert not [e for e in events if e["event"] == "media_unconfigured"]
    invites = [r for r in w.received if r.event == "call_invited"]  # not the chat's creation
    assert [r.payload["media"] is not None for r in invites] == [True, True]
    assert _unconfigured(w, "CallInvited") == 0
