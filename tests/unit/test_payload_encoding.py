"""The fast payload encoder against the contracts, without a database: values of every type
the projections produce, absent optionals, and the rows the reference path refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4

import orjson
import pytest

from realtime_dispatch.contracts.chats import ChatUpdated
from realtime_dispatch.contracts.conferences import ConferenceStarted
from realtime_dispatch.contracts.media import IceServer, MediaJoin
from realtime_dispatch.contracts.messages import MessageReceived
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.encoding import FAST, ModelEncoder, stamp_event_id
from realtime_dispatch.errors import PayloadBuildError

REFERENCE = ModelEncoder()


class DriverUUID(UUID):
    """Like asyncpg's own UUID type: a subclass orjson does not write by itself."""


def _same(model: type, fields: dict[str, object]) -> dict[str, object]:
    fast = orjson.loads(FAST.encode(model, fields))  # type: ignore[arg-type]
    assert fast == orjson.loads(REFERENCE.encode(model, fields))  # type: ignore[arg-type]
    assert fast == model.model_validate(fields).wire()  # type: ignore[attr-defined]
    return fast  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 12, 1, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 12, 1, 3, 4, 5, 120, tzinfo=UTC),
        datetime(2026, 12, 1, 3, 4, 5, 999999, tzinfo=timezone(timedelta(hours=-7))),
        datetime(2026, 12, 1, 3, 4, 5),
    ],
)
def test_times_ids_and_absent_optionals_as_the_contract_writes_them(when: datetime) -> None:
    chat = DriverUUID(str(uuid4()))
    fields = {
        "chat_id": chat,
        "message_id": uuid4(),
        "seq": 2**40,
        "sender_user_id": None,
        "kind": "File",
        "sent_at": when,
        "body": 'ünïcode "quoted" \u2028',
        "file_meta": {"fileId": "f", "size": 1.5, "nested": {"a": [1, None]}, "none": None},
        "card_text": None,
    }
    wire = _same(MessageReceived, fields)
    assert wire["chatId"] == str(chat)
    assert "senderUserId" not in wire
    assert "cardText" not in wire


def test_nested_media_join() -> None:
    media = MediaJoin(
        room_name="r",
        access_token="t",
        expires_at=datetime.now(UTC),
        ice_servers=[IceServer(urls=["turn:x"], username="u", credential="c")],
    )
    fields = {
        "conference_id": uuid4(),
        "chat_id": uuid4(),
        "room_name": "r",
        "started_by_user_id": uuid4(),
        "started_at": datetime.now(UTC),
        "media": media,
    }
    assert _same(ConferenceStarted, fields)["media"]["iceServers"][0]["urls"] == ["turn:x"]  # type: ignore[index,call-overload]


@pytest.mark.parametrize(
    "fields",
    [
        {"chat_id": uuid4(), "event_kind": None, "occurred_at": datetime.now(UTC)},
        {"chat_id": uuid4(), "event_kind": "x"},
        {
            "chat_id": uuid4(),
            "event_kind": "x",
            "occurred_at": datetime.now(UTC),
            "surprise": 1,
        },
    ],
)
def test_both_encoders_refuse_what_the_contract_refuses(fields: dict[str, object]) -> None:
    for encoder in (FAST, REFERENCE):
        with pytest.raises(PayloadBuildError) as caught:
            encoder.encode(ChatUpdated, fields)
        assert caught.value.code == "InvalidPayload"


def test_the_seam_stamps_event_id_first_and_the_encoders_never_write_it() -> None:
    row = uuid4()
    fields = {"chat_id": uuid4(), "event_kind": "x", "occurred_at": datetime.now(UTC)}
    for encoder in (FAST, REFERENCE):
        payload = encoder.encode(ChatUpdated, fields)
        assert b"eventId" not in payload
        stamped = stamp_event_id(payload, row)
        assert stamped.startswith(b'{"eventId":"' + str(row).encode())
        wire = orjson.loads(stamped)
        assert wire == {**orjson.loads(payload), "eventId": str(row)}
        assert ChatUpdated.model_validate(wire).event_id == row
    assert orjson.loads(stamp_event_id(b"{}", row)) == {"eventId": str(row)}


def test_push_from_json_or_object() -> None:
    encoded = Push("chat:x", "message_received", payload_json=b'{"seq":1}')
    built = Push("chat:x", "message_received", {"seq": 1})
    assert encoded.payload == {"seq": 1}
    assert built.payload_json == b'{"seq":1}'
    assert encoded == built
    with pytest.raises(AttributeError):
        encoded.group = "chat:y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Push("chat:x", "t")
