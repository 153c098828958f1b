"""The built-in ``ids`` builder (a catalogue row whose builder is ``ids``): the payload is the
row's own ids, written as the kind's contract has them, through the composite seam (which adds
``eventId``), with no query; a contract that wants more than ids quarantines the row."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

import orjson

from realtime_dispatch.contracts.base import KeyId, PushPayload
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import CompositePayloadBuilder
from realtime_dispatch.dispatch.projections.encoding import ModelEncoder
from realtime_dispatch.dispatch.projections.ids import IdsPayloadBuilder
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.outbox.model import ClaimedRow, RealtimeDispatchKind

K = RealtimeDispatchKind


class _Cleared(PushPayload):
    chat_id: KeyId
    ref_id: KeyId


class _Blocked(PushPayload):
    ref_id: KeyId
    session_kind: str


def _row(
    kind: str, *, chat: UUID | None = None, user: UUID | None = None, **ids: object
) -> ClaimedRow:
    return ClaimedRow(
        id=uuid4(),
        kind=kind,
        target_kind="ChatGroup" if chat is not None else "User",
        chat_id=chat,
        target_user_id=user,
        message_id=ids.get("message_id"),  # type: ignore[arg-type]
        ref_id=ids.get("ref_id"),  # type: ignore[arg-type]
        session_kind=ids.get("session_kind"),  # type: ignore[arg-type]
        seq=ids.get("seq"),  # type: ignore[arg-type]
        attempts=1,
        row_version=2,
        created_at=datetime.now(UTC),
    )


def _sent(result: object) -> tuple[str, str, object]:
    """A built push's group, target and decoded payload."""
    assert isinstance(result, Push)
    return result.group, result.target, orjson.loads(result.payload_json)


async def test_the_payload_is_the_row_s_ids_as_its_contract_has_them() -> None:
    builder = IdsPayloadBuilder(
        kinds=frozenset({K.CHAT_UPDATED, K.RECORDING_FAILED}),
        models={K.CHAT_UPDATED: _Cleared, K.RECORDING_FAILED: _Blocked},
    )
    composite = CompositePayloadBuilder([builder])
    chat, ref, user = uuid4(), uuid4(), uuid4()
    to_chat = _row("ChatUpdated", chat=chat, ref_id=ref)
    to_user = _row("RecordingFailed", user=user, ref_id=ref, session_kind="Direct")
    results = await composite.build(None, [to_chat, to_user])  # type: ignore[arg-type]
    pushed = results[to_chat.id]
    assert _sent(pushed) == (
        f"chat:{chat}",
        "chat_updated",
        {"eventId": str(to_chat.id), "chatId": str(chat), "refId": str(ref)},
    )
    direct = results[to_user.id]
    assert _sent(direct) == (
        f"user:{user}",
        "recording_failed",
        {"eventId": str(to_user.id), "refId": str(ref), "sessionKind": "Direct"},
    )
    # The reference encoder writes the same JSON.
    again = IdsPayloadBuilder(
        encoder=ModelEncoder(), kinds=frozenset({K.CHAT_UPDATED}), models={K.CHAT_UPDATED: _Cleared}
    )
    same = (await CompositePayloadBuilder([again]).build(None, [to_chat]))[to_chat.id]  # type: ignore[arg-type]
    assert isinstance(same, Push)
    assert orjson.loads(same.payload_json) == orjson.loads(pushed.payload_json)


async def test_a_contract_that_wants_more_than_ids_quarantines_the_row() -> None:
    """``MessageDeleted``'s contract has ``deletedAt``, which no row carries."""
    composite = CompositePayloadBuilder([IdsPayloadBuilder(kinds=frozenset({K.MESSAGE_DELETED}))])
    row = _row("MessageDeleted", chat=uuid4(), message_id=uuid4(), seq=3)
    result = (await composite.build(None, [row]))[row.id]  # type: ignore[arg-type]
    assert isinstance(result, PayloadBuildError)
    assert result.code == "InvalidPayload"
    assert "deletedAt missing" in str(result)
