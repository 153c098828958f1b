"""The payload JSON the dispatcher sends (written by orjson straight from the projection's
fields) is the JSON of the pydantic contract, ``Model.model_validate(fields).wire()``, for every
kind and both shapes of ``call_invited`` / ``call_ended``: built from real rows, written by the
real owner commands, right after each command as the dispatcher would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.contracts.events import EVENT_MODELS, GROUP_EVENT_MODELS, event_model
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.encoding import FAST, ModelEncoder
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger import calls, conferences, messages
from realtime_dispatch.messenger.messages import MessageContent, MessageKind
from realtime_dispatch.outbox.model import ClaimedRow, RealtimeDispatchKind
from realtime_dispatch.values.ids import new_id
from tests.integration.messenger_scenario import STEPS, Ctx, last_id
from tests.integration.messenger_world import MEDIA

CLAIMED_COLUMNS = (
    "id, kind, target_kind, chat_id, target_user_id, message_id, ref_id, session_kind, seq,"
    " attempts, row_version, created_at"
)
REFERENCE = ModelEncoder()
INSERT = (
    "INSERT INTO messenger.realtime_outbox"
    " (id, kind, target_kind, chat_id, target_user_id, ref_id, session_kind)"
    " VALUES ($7, $1, $2, $3, $4, $5, $6)"  # a UUIDv7: after every id written so far
)


class CheckingEncoder:
    """Writes each payload with the fast encoder and keeps the reference beside it."""

    def __init__(self) -> None:
        self.encoded: list[tuple[type[Contract], bytes, dict[str, Any]]] = []

    def encode(self, model: type[Contract], fields: Mapping[str, Any]) -> bytes:
        fast = FAST.encode(model, fields)
        self.encoded.append((model, fast, orjson.loads(REFERENCE.encode(model, fields))))
        return fast


async def _build_new(
    pool: asyncpg.Pool, after: UUID, encoder: CheckingEncoder
) -> Sequence[tuple[ClaimedRow, Push]]:
    records = await pool.fetch(
        f"SELECT {CLAIMED_COLUMNS} FROM messenger.realtime_outbox WHERE id > $1 ORDER BY id",
        after,
    )
    rows = [ClaimedRow(*r) for r in records]
    builder = default_payload_builder(MEDIA, encoder=encoder)
    async with pool.acquire() as conn:
        built = await builder.build(conn, rows)
    pushes = []
    for row in rows:
        result = built[row.id]
        assert isinstance(result, Push), (row.kind, row.session_kind, result)
        pushes.append((row, result))
    return pushes


async def test_fast_payload_json_is_the_contracts_json_for_every_kind(pool: asyncpg.Pool) -> None:
    encoder = CheckingEncoder()
    ctx = Ctx(pool)
    await ctx.setup()
    pushes: list[tuple[ClaimedRow, Push]] = []
    for step in STEPS:
        after = await last_id(pool)
        async with pool.acquire() as conn:
            await step.run(ctx, conn)
        pushes += await _build_new(pool, after, encoder)

    # The shapes the scenario does not write: group calls, a personal conference invitation,
    # File and Card messages, a message deleted before its row is built.
    after = await last_id(pool)
    chat, alice, bob = ctx.ids["chat"], ctx.alice, ctx.bob
    async with pool.acquire() as conn:
        conference = await conferences.start_conference(conn, chat_id=chat, actor=alice)
        roster = await conferences.invite_to_conference(
            conn, conference_id=conference, actor=alice, user_id=ctx.carol
        )
        for content in (
            MessageContent(
                kind=MessageKind.FILE,
                file_meta={"fileId": "f1", "name": "a.pdf", "size": 10, "contentType": None},
                body="caption",
            ),
            MessageContent(kind=MessageKind.CARD, card_text="card"),
        ):
            await messages.send_message(conn, chat_id=chat, sender=bob, content=content)
        gone = await messages.send_message(conn, chat_id=chat, sender=bob, body="soon gone")
        await messages.delete_message(conn, chat_id=chat, message_id=gone.message_id, actor=bob)
    await pool.executemany(
        INSERT,
        [
            ("CallInvited", "ChatGroup", chat, None, conference, "Conference", new_id()),
            ("ConferenceInvited", "User", None, ctx.carol, roster, "Direct", new_id()),
        ],
    )
    pushes += await _build_new(pool, after, encoder)
    after = await last_id(pool)
    async with pool.acquire() as conn:
        await conferences.end_conference(conn, conference_id=conference, actor=alice)
    await pool.execute(
        INSERT, "CallEnded", "ChatGroup", chat, None, conference, "Conference", new_id()
    )
    pushes += await _build_new(pool, after, encoder)

    # Same JSON, model by model.
    assert len(encoder.encoded) == len(pushes)
    for model, fast, reference in encoder.encoded:
        assert orjson.loads(fast) == reference, model.__name__
    # Every push carries that JSON with its row's id as eventId, and a client parses it with
    # the published model.
    for row, push in pushes:
        assert push.payload == orjson.loads(push.payload_json)
        assert push.payload["eventId"] == str(row.id), row.kind
        if push.target == "chat_updated":  # the reference messenger gives both one id
            assert push.payload["chatEventId"] == push.payload["eventId"]
        assert push.target == RealtimeDispatchKind(row.kind).event_name
        model = event_model(push.target, push.payload)
        assert model is not None
        assert model.model_validate(push.payload).wire() == push.payload
    # Every kind, both call shapes, media minted and absent optionals left out were covered.
    covered = {model for model, _, _ in encoder.encoded}
    assert covered == {*EVENT_MODELS.values(), *GROUP_EVENT_MODELS.values()}
    assert {RealtimeDispatchKind(row.kind) for row, _ in pushes} == set(RealtimeDispatchKind)
    wire = [orjson.loads(fast) for _, fast, _ in encoder.encoded]
    assert any("media" in p for p in wire)
    assert any("fileMeta" in p and p["fileMeta"]["contentType"] is None for p in wire)
    assert any("cardText" in p for p in wire)
    assert any(p.get("kind") == "Text" and "body" not in p for p in wire)  # deleted: no body
    assert all(isinstance(p["chatId"], str) for p in wire if "chatId" in p)
    assert any(str(p.get("sentAt", "")).endswith("Z") for p in wire)


async def test_calls_direct_shape_is_covered_apart_from_the_group_one(pool: asyncpg.Pool) -> None:
    """A 1:1 call_ended keeps its own contract (never the group shape's fields)."""
    encoder = CheckingEncoder()
    ctx = Ctx(pool)
    await ctx.setup()
    after = await last_id(pool)
    async with pool.acquire() as conn:
        call = await calls.start_call(conn, caller=ctx.alice, callee=ctx.bob)
        await calls.answer_call(conn, call_id=call, actor=ctx.bob)
        await calls.end_call(conn, call_id=call, actor=ctx.alice)
    pushes = await _build_new(pool, after, encoder)
    ended = [p for row, p in pushes if row.kind == "CallEnded"]
    assert ended
    for push in ended:
        assert "conferenceId" not in push.payload
        assert push.payload["endedByUserId"] == str(ctx.alice)
    for model, fast, reference in encoder.encoded:
        assert orjson.loads(fast) == reference, model.__name__
