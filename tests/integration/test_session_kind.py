"""Spec acceptance row "SessionKind payload": the row's session kind picks the payload's shape
and audience. Each media kind that has both shapes is delivered in both; a kind with one shape
still refuses the other."""

from __future__ import annotations

from uuid import UUID, uuid4

import asyncpg
import jwt

from realtime_dispatch.client.events import parse_event
from realtime_dispatch.contracts.calls import CallInvited, GroupCallInvited
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger import calls, chats, conferences
from tests.integration.messenger_world import JITSI_SECRET, MEDIA
from tests.integration.support import make_stack

INSERT = (
    "INSERT INTO messenger.realtime_outbox"
    " (id, kind, target_kind, chat_id, target_user_id, ref_id, session_kind)"
    " VALUES (messenger.realtime_new_id(), $1, $2, $3, $4, $5, $6)"
)


async def _world(pool: asyncpg.Pool) -> tuple[UUID, UUID, UUID, UUID, UUID, UUID]:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        call = await calls.start_call(conn, caller=alice, callee=bob)
        conference = await conferences.start_conference(conn, chat_id=chat, actor=alice)
        roster = await conferences.invite_to_conference(
            conn, conference_id=conference, actor=alice, user_id=bob
        )
    # Only the hand-written rows below are dispatched.
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    return alice, bob, chat, call, conference, roster


async def test_call_invited_takes_the_shape_of_its_session_kind(pool: asyncpg.Pool) -> None:
    alice, bob, chat, call, conference, _ = await _world(pool)
    await pool.executemany(
        INSERT,
        [
            ("CallInvited", "User", None, bob, call, "Direct"),
            ("CallInvited", "ChatGroup", chat, None, conference, "Conference"),
        ],
    )
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    assert (report.dispatched, report.quarantined) == (2, 0)
    by_group = {p.group: p for p in stack.publisher.pushes}
    direct, group = by_group[f"user:{bob}"], by_group[f"chat:{chat}"]
    assert direct.target == group.target == "call_invited"
    assert direct.payload["callId"] == str(call)
    assert direct.payload["calleeUserId"] == str(bob)
    assert group.payload["callId"] == group.payload["conferenceId"] == str(conference)
    assert group.payload["chatId"] == str(chat)
    assert group.payload["startedByUserId"] == str(alice)
    assert "calleeUserId" not in group.payload
    assert {"roomName", "invitedAt"} <= set(group.payload)
    # The client SDK reads each shape as its own contract.
    assert isinstance(parse_event("call_invited", (direct.payload,)), CallInvited)
    parsed = parse_event("call_invited", (group.payload,))
    assert isinstance(parsed, GroupCallInvited)
    assert parsed.chat_id == chat


async def test_call_ended_takes_the_shape_of_its_session_kind(pool: asyncpg.Pool) -> None:
    alice, bob, chat, call, conference, _ = await _world(pool)
    async with pool.acquire() as conn:
        await calls.answer_call(conn, call_id=call, actor=bob)
        await calls.end_call(conn, call_id=call, actor=alice)
        await conferences.end_conference(conn, conference_id=conference, actor=alice)
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    await pool.executemany(
        INSERT,
        [
            ("CallEnded", "User", None, alice, call, "Direct"),
            ("CallEnded", "ChatGroup", chat, None, conference, "Conference"),
        ],
    )
    stack = make_stack(pool)
    assert (await stack.dispatcher.run_pass()).dispatched == 2
    by_group = {p.group: p for p in stack.publisher.pushes}
    assert by_group[f"user:{alice}"].payload["callerUserId"] == str(alice)
    group = by_group[f"chat:{chat}"].payload
    assert (group["conferenceId"], group["chatId"]) == (str(conference), str(chat))
    assert group["endedByUserId"] == str(alice)


async def test_conference_invited_takes_the_shape_of_its_session_kind(pool: asyncpg.Pool) -> None:
    _, bob, chat, _, _, roster = await _world(pool)
    await pool.executemany(
        INSERT,
        [
            ("ConferenceInvited", "ChatGroup", chat, None, roster, "Conference"),
            ("ConferenceInvited", "User", None, bob, roster, "Direct"),
        ],
    )
    stack = make_stack(pool)
    assert (await stack.dispatcher.run_pass()).dispatched == 2
    groups = {p.group: p.payload for p in stack.publisher.pushes}
    assert set(groups) == {f"chat:{chat}", f"user:{bob}"}
    assert groups[f"user:{bob}"]["invitedUserId"] == str(bob)


async def test_media_is_minted_for_the_audience_of_the_shape(pool: asyncpg.Pool) -> None:
    _, bob, chat, _, conference, roster = await _world(pool)
    await pool.executemany(
        INSERT,
        [
            ("CallInvited", "ChatGroup", chat, None, conference, "Conference"),
            ("ConferenceInvited", "User", None, bob, roster, "Direct"),
        ],
    )
    rows = await make_stack(pool).store.claim(10)
    built = await default_payload_builder(MEDIA).build(pool, rows)  # type: ignore[arg-type]
    contexts = {}
    for push in built.values():
        assert not isinstance(push, Exception)
        media = push.payload["media"]
        assert isinstance(media, dict)
        claims = jwt.decode(
            media["accessToken"], JITSI_SECRET, algorithms=["HS256"], audience="jitsi"
        )
        contexts[push.group] = claims["context"]
    assert contexts == {
        f"chat:{chat}": {"group": str(chat)},
        f"user:{bob}": {"user": {"id": str(bob)}},
    }


async def test_a_shape_the_kind_does_not_have_is_still_refused(pool: asyncpg.Pool) -> None:
    _, bob, chat, call, conference, roster = await _world(pool)
    await pool.executemany(
        INSERT,
        [
            # Answering is between two parties: no group shape.
            ("CallAnswered", "ChatGroup", chat, None, conference, "Conference"),
            # A personal invitation only goes to the invited user.
            ("ConferenceInvited", "User", None, uuid4(), roster, "Direct"),
            # The group shape refers to a conference, not to a 1:1 call.
            ("CallInvited", "ChatGroup", chat, None, call, "Conference"),
            # A conference's start is the chat's news only.
            ("ConferenceStarted", "User", None, bob, conference, "Direct"),
        ],
    )
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    assert (report.dispatched, report.quarantined) == (0, 4)
    errors = sorted(
        r["last_error"].split(":")[1]
        for r in await pool.fetch(
            "SELECT last_error FROM messenger.realtime_outbox WHERE status = 'Quarantined'"
        )
    )
    assert errors == ["BadSessionKind", "BadSessionKind", "ConferenceNotFound", "TargetMismatch"]
