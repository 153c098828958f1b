"""What a typed hub event does to the client's timelines (pure): which chat it touches, whether it
changed anything or was a duplicate, and whether the chat now needs a REST resync."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.contracts.chats import ReadReceiptUpdated
from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.values.keys import Key
from realtime_dispatch_client.timeline import Change, Timeline, TimelineMessage


class Timelines:
    """Every chat's :class:`Timeline`, created on first mention."""

    def __init__(self) -> None:
        self._by_chat: dict[Key, Timeline] = {}

    def get(self, chat_id: Key) -> Timeline:
        timeline = self._by_chat.get(chat_id)
        if timeline is None:
            timeline = self._by_chat[chat_id] = Timeline(chat_id)
        return timeline

    def __contains__(self, chat_id: object) -> bool:
        return chat_id in self._by_chat

    def __iter__(self) -> Iterator[Timeline]:
        return iter(list(self._by_chat.values()))


@dataclass(frozen=True, slots=True)
class Applied:
    """``change`` is None for events that do not touch a timeline (calls, contacts, …) and
    for a read receipt that moved nothing (``DUPLICATE``); ``needs_sync`` when a seq is now
    missing."""

    chat_id: Key | None
    change: Change | None
    needs_sync: bool = False

    @property
    def duplicate(self) -> bool:
        return self.change is Change.DUPLICATE

    @property
    def fresh(self) -> bool:
        """Pass the event on to callbacks: it changed something (or is not a chat event)."""
        return self.change is not Change.DUPLICATE


def received(event: MessageReceived) -> TimelineMessage:
    return TimelineMessage(
        chat_id=event.chat_id,
        message_id=event.message_id,
        seq=event.seq,
        sender_user_id=event.sender_user_id,
        body=event.body,
        sent_at=event.sent_at,
        kind=event.kind,
        file_meta=event.file_meta,
        card_text=event.card_text,
    )


def apply_event(timelines: Timelines, event: Contract) -> Applied:
    if isinstance(event, MessageReceived):
        timeline = timelines.get(event.chat_id)
        change = timeline.add(received(event))
    elif isinstance(event, MessageEdited):
        timeline = timelines.get(event.chat_id)
        change = timeline.edit(
            event.message_id, event.seq, event.body, event.edited_at, event.card_text
        )
    elif isinstance(event, MessageDeleted):
        timeline = timelines.get(event.chat_id)
        change = timeline.delete(event.message_id, event.seq, event.deleted_at)
    elif isinstance(event, ReadReceiptUpdated):
        timeline = timelines.get(event.chat_id)
        moved = timeline.read(event.user_id, event.last_read_seq)
        return Applied(event.chat_id, Change.UPDATED if moved else Change.DUPLICATE)
    else:
        return Applied(None, None)
    return Applied(timeline.chat_id, change, needs_sync=timeline.has_gap)
