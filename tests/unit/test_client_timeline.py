"""The client's pure core: timeline dedupe, seq order, gaps, edits and deletions, read marks,
and what a typed hub event does to the timelines."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from realtime_dispatch.client.apply import Timelines, apply_event
from realtime_dispatch.client.events import BY_EVENT_NAME
from realtime_dispatch.client.timeline import Change, Timeline, TimelineMessage, merge
from realtime_dispatch.contracts.calls import CallInvited
from realtime_dispatch.contracts.chats import ReadReceiptUpdated
from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.outbox.model import RealtimeDispatchKind

CHAT = uuid4()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def msg(seq: int, body: str | None = None, **changes: object) -> TimelineMessage:
    values: dict[str, object] = {
        "chat_id": CHAT,
        "message_id": UUID(int=seq),
        "seq": seq,
        "sender_user_id": None,
        "body": body if body is not None else f"m{seq}",
        "sent_at": T0 + timedelta(seconds=seq),
    }
    values.update(changes)
    return TimelineMessage(**values)  # type: ignore[arg-type]


def test_a_second_copy_of_a_seq_is_dropped() -> None:
    timeline = Timeline(CHAT)
    assert timeline.add(msg(1)) is Change.ADDED
    assert timeline.add(msg(1)) is Change.DUPLICATE
    assert [m.seq for m in timeline.messages()] == [1]


def test_a_message_id_seen_again_under_another_seq_is_dropped() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    assert timeline.add(replace(msg(1), seq=2)) is Change.DUPLICATE
    assert len(timeline) == 1


def test_messages_are_kept_in_seq_order_whatever_the_arrival_order() -> None:
    timeline = Timeline(CHAT)
    for seq in (3, 1, 5, 2, 4):
        timeline.add(msg(seq))
    assert [m.seq for m in timeline.messages()] == [1, 2, 3, 4, 5]


def test_a_seq_jump_is_a_gap_until_the_missing_seqs_arrive() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    assert not timeline.has_gap
    timeline.add(msg(4))
    assert timeline.has_gap
    assert (timeline.contiguous_seq, timeline.highest_seq) == (1, 4)
    assert timeline.add_history([msg(2), msg(3), msg(4)]) == [msg(2), msg(3)]
    assert not timeline.has_gap
    assert timeline.contiguous_seq == 4


def test_a_first_message_beyond_seq_1_asks_for_the_history_before_it() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(7))
    assert timeline.has_gap
    assert timeline.contiguous_seq == 0


def test_an_edit_replaces_the_body_and_a_repeat_of_it_is_a_duplicate() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    at = T0 + timedelta(minutes=1)
    assert timeline.edit(UUID(int=1), 1, "fixed", at) is Change.UPDATED
    assert timeline.edit(UUID(int=1), 1, "fixed", at) is Change.DUPLICATE
    [only] = timeline.messages()
    assert (only.body, only.edited_at) == ("fixed", at)


def test_an_older_edit_or_an_unedited_copy_never_undoes_a_newer_edit() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    timeline.edit(UUID(int=1), 1, "second", T0 + timedelta(minutes=2))
    assert timeline.edit(UUID(int=1), 1, "first", T0 + timedelta(minutes=1)) is Change.DUPLICATE
    assert timeline.add(msg(1)) is Change.DUPLICATE  # the push of the original, repeated
    assert timeline.messages()[0].body == "second"


def test_a_deletion_sticks_and_drops_the_body() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    assert timeline.delete(UUID(int=1), 1, T0) is Change.UPDATED
    assert timeline.edit(UUID(int=1), 1, "late edit", T0 + timedelta(hours=1)) is Change.DUPLICATE
    assert timeline.add(msg(1)) is Change.DUPLICATE
    [only] = timeline.messages()
    assert only.deleted
    assert only.body is None


def test_an_edit_of_a_message_not_seen_yet_reveals_a_gap() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    assert timeline.edit(UUID(int=3), 3, "x", T0) is Change.UNKNOWN
    assert timeline.has_gap
    assert timeline.highest_seq == 3


def test_history_carries_later_edits_into_known_messages() -> None:
    timeline = Timeline(CHAT)
    timeline.add(msg(1))
    edited = msg(1, "edited", edited_at=T0 + timedelta(minutes=1))
    assert timeline.add_history([edited]) == []
    assert timeline.messages()[0].body == "edited"


def test_merge_prefers_the_later_edit_in_either_order() -> None:
    a = msg(1, "a", edited_at=T0 + timedelta(seconds=10))
    b = msg(1, "b", edited_at=T0 + timedelta(seconds=20))
    assert merge(a, b).body == "b"
    assert merge(b, a).body == "b"


def test_read_marks_only_move_forward() -> None:
    timeline = Timeline(CHAT)
    reader = uuid4()
    assert timeline.read(reader, 3)
    assert not timeline.read(reader, 3)
    assert not timeline.read(reader, 2)
    assert timeline.read_marks == {reader: 3}


def test_a_message_of_another_chat_is_refused() -> None:
    with pytest.raises(ValueError, match="another chat"):
        Timeline(uuid4()).add(msg(1))


# --- typed events → timelines -------------------------------------------------------------


def received(seq: int) -> MessageReceived:
    return MessageReceived(
        chat_id=CHAT, message_id=UUID(int=seq), seq=seq, kind="Text", sent_at=T0, body=f"m{seq}"
    )


def test_double_delivery_of_one_message_shows_one_message() -> None:
    timelines = Timelines()
    first = apply_event(timelines, received(1))
    again = apply_event(timelines, received(1))
    assert (first.change, first.fresh, first.needs_sync) == (Change.ADDED, True, False)
    assert (again.change, again.duplicate, again.fresh) == (Change.DUPLICATE, True, False)
    assert [m.seq for m in timelines.get(CHAT).messages()] == [1]


def test_a_pushed_gap_asks_for_a_resync() -> None:
    timelines = Timelines()
    apply_event(timelines, received(1))
    assert apply_event(timelines, received(3)).needs_sync


def test_edits_deletes_and_receipts_apply_to_the_chat() -> None:
    timelines = Timelines()
    apply_event(timelines, received(1))
    edit = MessageEdited(chat_id=CHAT, message_id=UUID(int=1), seq=1, edited_at=T0, body="new")
    assert apply_event(timelines, edit).change is Change.UPDATED
    assert apply_event(timelines, edit).duplicate
    gone = MessageDeleted(chat_id=CHAT, message_id=UUID(int=1), seq=1, deleted_at=T0)
    assert apply_event(timelines, gone).change is Change.UPDATED
    reader = uuid4()
    receipt = ReadReceiptUpdated(chat_id=CHAT, user_id=reader, last_read_seq=1, read_at=T0)
    assert apply_event(timelines, receipt).fresh
    assert apply_event(timelines, receipt).duplicate
    assert timelines.get(CHAT).messages()[0].deleted


def test_events_outside_chats_pass_through_untouched() -> None:
    call = CallInvited(
        call_id=uuid4(),
        caller_user_id=uuid4(),
        callee_user_id=uuid4(),
        room_name="r",
        invited_at=T0,
    )
    applied = apply_event(Timelines(), call)
    assert (applied.chat_id, applied.change, applied.fresh) == (None, None, True)


def test_every_kind_has_a_typed_event() -> None:
    assert set(BY_EVENT_NAME) == {kind.event_name for kind in RealtimeDispatchKind}


def test_card_edits_and_deletions_apply_to_card_text_and_file_meta() -> None:
    timeline = Timeline(CHAT)
    card = msg(1, kind="Card", body=None, card_text="Lunch?")
    file = msg(2, kind="File", body="caption", file_meta={"fileId": "f", "name": "a.png"})
    timeline.add_history([card, file])
    assert timeline.edit(card.message_id, 1, None, T0 + timedelta(minutes=1), "Dinner?") is (
        Change.UPDATED
    )
    # A push that overtook the edit (older edited_at) does not bring the old text back.
    assert timeline.add(replace(card, card_text="Lunch?")) is Change.DUPLICATE
    assert timeline.delete(file.message_id, 2, T0 + timedelta(minutes=2)) is Change.UPDATED
    [card_now, file_now] = timeline.messages()
    assert (card_now.kind, card_now.card_text) == ("Card", "Dinner?")
    assert (file_now.kind, file_now.body, file_now.file_meta) == ("File", None, None)
