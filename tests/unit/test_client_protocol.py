"""The client side of the JSON hub protocol, event parsing and the reconnect delay (pure)."""

from __future__ import annotations

import asyncio
import socket
from uuid import uuid4

import pytest
import structlog.testing

from realtime_dispatch.client.client import MessengerClient
from realtime_dispatch.client.connection import (
    ConnectionOptions,
    HubClientConnection,
    hub_ws_url,
)
from realtime_dispatch.client.events import parse_event
from realtime_dispatch.client.exceptions import HubProtocolError
from realtime_dispatch.client.protocol import (
    CloseRecord,
    EventRecord,
    OtherRecord,
    RecordSplitter,
    parse_handshake_response,
    parse_server_record,
    reconnect_delay,
)
from realtime_dispatch.client.seen import SeenEvents
from realtime_dispatch.contracts.messages import MessageReceived
from realtime_dispatch.contracts.signals import UserTyping
from realtime_dispatch.values.keys import BIGINT_KEYS, TEXT_KEYS, UUID_KEYS


def test_records_split_across_and_within_frames() -> None:
    splitter = RecordSplitter()
    assert splitter.feed('{}\x1e{"type":6}\x1e{"type":1,') == ["{}", '{"type":6}']
    assert splitter.feed(b'"target":"x","arguments":[1]}\x1e') == [
        '{"type":1,"target":"x","arguments":[1]}'
    ]
    assert splitter.feed("") == []


def test_server_records() -> None:
    assert parse_server_record('{"type":1,"target":"a","arguments":[{"k":1}]}') == EventRecord(
        "a", ({"k": 1},)
    )
    assert parse_server_record('{"type":6}') == OtherRecord(6)
    assert parse_server_record('{"type":7,"error":"bye","allowReconnect":true}') == CloseRecord(
        "bye", True
    )
    assert parse_server_record('{"type":7}') == CloseRecord(None, False)
    assert parse_server_record('{"type":99,"future":1}') == OtherRecord(99)


@pytest.mark.parametrize(
    "record", ["not json", "[1]", '{"type":"1"}', '{"type":1,"arguments":[]}', '{"type":true}']
)
def test_malformed_records_raise_protocol_error(record: str) -> None:
    with pytest.raises(HubProtocolError):
        parse_server_record(record)


def test_handshake_response() -> None:
    parse_handshake_response("{}")
    with pytest.raises(HubProtocolError, match="refused"):
        parse_handshake_response('{"error":"nope"}')


def test_event_parsing_is_typed_and_tolerates_new_fields() -> None:
    chat, message = uuid4(), uuid4()
    payload = {
        "chatId": str(chat),
        "messageId": str(message),
        "seq": 3,
        "kind": "Text",
        "sentAt": "2026-01-01T00:00:00Z",
        "body": "hi",
        "addedInAFutureVersion": True,
    }
    event = parse_event("message_received", (payload,))
    assert isinstance(event, MessageReceived)
    assert (event.chat_id, event.message_id, event.seq, event.body) == (chat, message, 3, "hi")
    assert parse_event("not_an_event_we_know", ({},)) is None
    with pytest.raises(HubProtocolError):
        parse_event("message_received", ({"chatId": "x"},))
    with pytest.raises(HubProtocolError):
        parse_event("message_received", ())


def _received(chat: object, message: object, sender: object) -> dict[str, object]:
    return {
        "chatId": chat,
        "messageId": message,
        "seq": 1,
        "senderUserId": sender,
        "kind": "Text",
        "sentAt": "2026-01-01T00:00:00Z",
    }


def test_typed_events_take_the_deployment_key_type() -> None:
    """bigint keys arrive as JSON numbers (a decimal string is the same key), text keys as
    strings; each type refuses the others' ids, and uuid stays the default."""
    event = parse_event("message_received", (_received(17, 1234, 42),), keys=BIGINT_KEYS)
    assert isinstance(event, MessageReceived)
    assert (event.chat_id, event.message_id, event.sender_user_id) == (17, 1234, 42)
    assert parse_event("message_received", (_received("17", 1234, 42),), keys=BIGINT_KEYS) == event
    text = parse_event("message_received", (_received("design", "p-1", "ana"),), keys=TEXT_KEYS)
    assert isinstance(text, MessageReceived)
    assert (text.chat_id, text.message_id, text.sender_user_id) == ("design", "p-1", "ana")
    typing = parse_event(
        "user_typing",
        ({"chatId": 17, "userId": 42, "expiresAt": "2026-01-01T00:00:05Z"},),
        keys=BIGINT_KEYS,
    )
    assert isinstance(typing, UserTyping)
    assert (typing.chat_id, typing.user_id) == (17, 42)
    chat, message = uuid4(), uuid4()
    uuids = parse_event("message_received", (_received(str(chat), str(message), None),))
    assert isinstance(uuids, MessageReceived)
    assert (uuids.chat_id, uuids.message_id) == (chat, message)
    for payload, keys in [
        (_received(17, 1234, 42), UUID_KEYS),  # numbers on a uuid deployment
        (_received("design", "p-1", None), BIGINT_KEYS),
        (_received(17, "p-1", None), TEXT_KEYS),
        (_received(True, 1, None), BIGINT_KEYS),  # a boolean is no key
    ]:
        with pytest.raises(HubProtocolError, match="does not match its contract"):
            parse_event("message_received", (payload,), keys=keys)
    # The wire form again: numbers stay numbers.
    assert event.wire()["chatId"] == 17
    assert uuids.wire()["chatId"] == str(chat)


async def test_events_of_another_key_type_say_which_option_to_set() -> None:
    """A client left on the default key type against a bigint deployment skips every event
    (each one a client_event_invalid warning); once, it says why and what to set."""
    client = MessengerClient("http://127.0.0.1:9", "token")
    record = EventRecord(
        "message_received", ({**_received(17, 1234, 42), "eventId": str(uuid4())},)
    )
    with structlog.testing.capture_logs() as logs:
        assert not await client._deliver(record.target, record.arguments)
        assert not await client._deliver(record.target, record.arguments)
    assert [e["event"] for e in logs] == [
        "client_event_invalid",
        "client_key_type_mismatch",
        "client_event_invalid",
    ]
    told = logs[1]
    assert (told["log_level"], told["key_type"], told["payload_key_type"]) == (
        "error",
        "uuid",
        "bigint",
    )
    assert 'ClientOptions(key_type="bigint")' in told["fix"]
    with structlog.testing.capture_logs() as logs:  # a payload that is wrong whatever the type
        fresh = MessengerClient("http://127.0.0.1:9", "token")
        assert not await fresh._deliver("message_received", ({"chatId": 17},))
    assert [e["event"] for e in logs] == ["client_event_invalid"]


def test_reconnect_delay_doubles_up_to_the_cap_and_jitter_only_shortens() -> None:
    delays = [reconnect_delay(n, base=0.25, cap=5, jitter=0) for n in range(1, 9)]
    assert delays == [0.25, 0.5, 1, 2, 4, 5, 5, 5]
    assert reconnect_delay(3, base=0.25, cap=5, jitter=0.5) == 0.5
    assert reconnect_delay(10_000, base=1, cap=5, jitter=0) == 5
    with pytest.raises(ValueError, match="starts at 1"):
        reconnect_delay(0, base=1, cap=5, jitter=0)


def test_hub_url_from_the_base_url() -> None:
    assert hub_ws_url("http://127.0.0.1:8000") == "ws://127.0.0.1:8000/hubs/messenger"
    assert hub_ws_url("https://chat.example/rt/") == "wss://chat.example/rt/hubs/messenger"


def test_connection_options_are_checked() -> None:
    with pytest.raises(ValueError, match="reconnect_base"):
        ConnectionOptions(reconnect_base=10, reconnect_cap=1)
    with pytest.raises(ValueError, match="> 0"):
        ConnectionOptions(ping_interval=0)


class _NoListener:
    async def hub_connected(self, reconnect: bool) -> None:
        raise AssertionError("never connects")

    async def hub_disconnected(self) -> None:
        pass

    async def hub_event(self, record: EventRecord) -> None:
        pass


def test_seen_events_remember_a_bounded_number_of_ids() -> None:
    seen = SeenEvents(capacity=2)
    a, b, c = uuid4(), uuid4(), uuid4()
    assert seen.first_time(a)
    assert not seen.first_time(a)
    assert seen.first_time(b)
    assert seen.first_time(c)  # a is forgotten now
    assert len(seen) == 2
    assert seen.first_time(a)
    with pytest.raises(ValueError, match="capacity"):
        SeenEvents(capacity=0)


async def test_reconnects_back_off_with_full_jitter() -> None:
    """Against a closed port: each wait is the capped exponential delay times a uniform draw
    from [0, 1): the whole window, not its upper half."""
    draws = iter([0.0, 0.999, 0.5, 0.25, 0.75])
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 5:
            raise asyncio.CancelledError

    options = ConnectionOptions(reconnect_base=1.0, reconnect_cap=8.0, open_timeout=2.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        connection = HubClientConnection(
            f"http://127.0.0.1:{port}",
            "token",
            _NoListener(),
            options,
            rng=lambda: next(draws),
            sleep=sleep,
        )
        with pytest.raises(asyncio.CancelledError):
            await connection.run()
    assert waits == pytest.approx([1 * 1.0, 2 * 0.001, 4 * 0.5, 8 * 0.75, 8 * 0.25])
