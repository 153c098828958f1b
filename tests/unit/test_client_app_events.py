"""Events of the application's own names in the Python SDK, on the sync path (a server with
declared kinds answers them in ``GET /api/sync`` like the built-in ones; here the page's items
go through the same ``_deliver`` a resume calls), and a timeline seeded from the application's
history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from realtime_dispatch.client import MessageReceived, MessengerClient
from realtime_dispatch.client.client import _takes_two
from realtime_dispatch.client.events import AppEvent
from realtime_dispatch.client.timeline import Timeline, TimelineMessage
from realtime_dispatch.contracts.calls import CallInvited, GroupCallInvited
from realtime_dispatch.contracts.sync import SyncPageOut


def _page(*events: tuple[str, dict[str, Any]]) -> SyncPageOut:
    return SyncPageOut.model_validate(
        {
            "events": [
                {"eventId": payload["eventId"], "target": target, "payload": payload}
                for target, payload in events
            ],
            "nextCursor": "c",
            "limited": False,
        }
    )


async def test_a_sync_page_of_declared_events_reaches_on_by_name_once() -> None:
    client = MessengerClient("http://127.0.0.1:9", "token")
    got: list[Any] = []
    client.on("reaction_added", got.append)
    client.on("reaction_removed", got.append)
    client.on("message_received", got.append)
    chat = uuid4()
    added = {"eventId": str(uuid4()), "chatId": str(chat), "emoji": "👍", "refId": "r1"}
    message = {
        "eventId": str(uuid4()),
        "chatId": str(chat),
        "messageId": str(uuid4()),
        "seq": 1,
        "kind": "Text",
        "body": "hi",
        "sentAt": "2026-01-01T00:00:00Z",
    }
    removed = {"eventId": str(uuid4()), "chatId": str(chat), "refId": "r1"}
    page = _page(
        ("reaction_added", added),
        ("message_received", message),
        ("reaction_removed", removed),
        ("reaction_added", added),  # the same event again (a push came first, or a re-read)
    )
    for item in page.events:
        await client._deliver(item.target, (item.payload,))
    assert [type(e).__name__ for e in got] == ["AppEvent", "MessageReceived", "AppEvent"]
    first, _, last = got
    assert isinstance(first, AppEvent)
    assert (first.name, first.payload, str(first.event_id)) == (
        "reaction_added",
        added,
        added["eventId"],
    )
    assert first.chat_id == str(chat)
    assert isinstance(last, AppEvent)
    assert last.name == "reaction_removed"
    assert client.stats.duplicates_dropped == 1
    # A malformed one (no object argument) is skipped; one without an eventId is not deduped.
    assert not await client._deliver("reaction_added", ("x",))
    assert await client._deliver("reaction_added", ({"emoji": "a"},))
    assert await client._deliver("reaction_added", ({"emoji": "a", "eventId": "not-a-uuid"},))
    assert len(got) == 5


def test_on_by_name_of_a_built_in_event_is_typed() -> None:
    client = MessengerClient("http://127.0.0.1:9", "token")
    client.on("message_received", print)
    client.on("call_invited", print)  # both of its shapes
    assert set(client._callbacks) == {MessageReceived, CallInvited, GroupCallInvited}
    with pytest.raises(ValueError, match="event name"):
        client.on("", print)


def test_hooks_that_take_a_chat_are_asked_about_new_chats() -> None:
    def old(reason: str) -> None: ...
    def new(reason: str, chat_id: object = None) -> None: ...
    def any_args(*args: object) -> None: ...

    assert not _takes_two(old)
    assert _takes_two(new)
    assert _takes_two(any_args)


def _message(chat: Any, seq: int) -> TimelineMessage:
    return TimelineMessage(chat, f"m{seq}", seq, "u", f"body {seq}", datetime.now(UTC))


def test_a_timeline_starts_after_what_the_application_shows_itself() -> None:
    timeline = Timeline("c")
    timeline.start_after(5)  # first seen live at seq 6
    assert timeline.add(_message("c", 6)).value == "added"
    assert not timeline.has_gap
    assert timeline.contiguous_seq == 6
    timeline.start_after(2)  # never back
    assert timeline.contiguous_seq == 6
    assert timeline.add(_message("c", 8)).value == "added"
    assert timeline.has_gap  # a gap after the start is a gap

    seeded = Timeline("d")
    assert seeded.add(_message("d", 12)).value == "added"  # a push before the seed
    new = seeded.seed([_message("d", s) for s in range(10, 13)])
    assert [m.seq for m in new] == [10, 11]  # 12 was there
    assert seeded.contiguous_seq == 12
    assert not seeded.has_gap


async def test_a_chat_first_heard_of_by_a_read_receipt_starts_at_its_first_message() -> None:
    """With the application's own resync: a read receipt tells no seq to start from, so the
    chat's first message (seq 6) starts its timeline, and nothing is asked of sync."""
    client = MessengerClient("http://127.0.0.1:9", "token", resync=lambda reason: None)
    chat, user = uuid4(), uuid4()
    receipt = {
        "eventId": str(uuid4()),
        "chatId": str(chat),
        "userId": str(user),
        "lastReadSeq": 5,
        "readAt": "2026-01-01T00:00:00Z",
    }
    message = {
        "eventId": str(uuid4()),
        "chatId": str(chat),
        "messageId": str(uuid4()),
        "seq": 6,
        "kind": "Text",
        "body": "hi",
        "sentAt": "2026-01-01T00:00:00Z",
    }
    assert await client._deliver("read_receipt_updated", (receipt,), live=True)
    assert await client._deliver("message_received", (message,), live=True)
    timeline = client.timeline(chat)
    assert (timeline.contiguous_seq, timeline.has_gap) == (6, False)
    assert client._resumer is None  # no read of sync was asked for
    later = {**message, "eventId": str(uuid4()), "messageId": str(uuid4()), "seq": 8}
    assert await client._deliver("message_received", (later,), live=True)
    assert timeline.has_gap  # a gap after the start is one
