"""A chat's timeline as the client sees it: messages keyed by their per-chat ``seq``,
deduplicated, edits and deletions applied, and the first seq that is missing. Pure: no I/O, no
clock; the client feeds it hub events and REST pages and asks it what to fetch.

Seqs of a chat are 1, 2, 3 … without holes (the owner allocates them under the chat's row
lock), so "complete" means every seq from 1 to the highest seen, and a push whose seq is beyond
``contiguous_seq + 1`` reveals a gap that REST (``afterSeq=contiguous_seq``) fills.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

from realtime_dispatch.values.keys import Key


@dataclass(frozen=True, slots=True)
class TimelineMessage:
    chat_id: Key
    message_id: Key
    seq: int
    sender_user_id: Key | None
    body: str | None
    sent_at: datetime
    edited_at: datetime | None = None
    deleted_at: datetime | None = None
    kind: str = "Text"
    """``Text``, ``File`` (``file_meta``, ``body`` a caption) or ``Card`` (``card_text``)."""
    file_meta: dict[str, Any] | None = None
    card_text: str | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


def merge(current: TimelineMessage, incoming: TimelineMessage) -> TimelineMessage:
    """Two views of one message, newest state wins: a deletion sticks (and drops the content);
    otherwise the view with the later ``edited_at`` (unedited counts as oldest) gives the body
    and card text."""
    deleted_at = current.deleted_at or incoming.deleted_at
    if deleted_at is not None:
        return replace(current, body=None, file_meta=None, card_text=None, deleted_at=deleted_at)
    newer = incoming
    if current.edited_at is not None and (
        incoming.edited_at is None or incoming.edited_at < current.edited_at
    ):
        newer = current
    return replace(current, body=newer.body, card_text=newer.card_text, edited_at=newer.edited_at)


class Change(Enum):
    ADDED = "added"  # a message this timeline did not have
    DUPLICATE = "duplicate"  # already here, nothing changed: dropped
    UPDATED = "updated"  # an edit or deletion changed a message
    UNKNOWN = "unknown"  # an edit or deletion of a message not here yet (the timeline has a gap)


class Timeline:
    """One chat's messages in seq order, plus everyone's read marks."""

    __slots__ = ("_by_id", "_by_seq", "_contiguous", "_highest", "chat_id", "read_marks")

    def __init__(self, chat_id: Key) -> None:
        self.chat_id = chat_id
        self._by_seq: dict[int, TimelineMessage] = {}
        self._by_id: dict[Key, int] = {}
        self._contiguous = 0
        self._highest = 0
        self.read_marks: dict[Key, int] = {}

    # --- what the client asks -------------------------------------------------------------

    @property
    def contiguous_seq(self) -> int:
        """Every seq from 1 to this one is here: REST resumes with ``afterSeq`` = this."""
        return self._contiguous

    @property
    def highest_seq(self) -> int:
        """The highest seq this timeline has heard of (from a message, an edit or a delete)."""
        return self._highest

    @property
    def has_gap(self) -> bool:
        return self._highest > self._contiguous

    def messages(self) -> list[TimelineMessage]:
        return [self._by_seq[s] for s in sorted(self._by_seq)]

    def get(self, message_id: Key) -> TimelineMessage | None:
        seq = self._by_id.get(message_id)
        return None if seq is None else self._by_seq[seq]

    def __len__(self) -> int:
        return len(self._by_seq)

    # --- what the client feeds --------------------------------------------------------------

    def add(self, message: TimelineMessage) -> Change:
        """A pushed (or fetched) message; a second copy of a seq or message id is dropped, and
        a fetched copy of a message already here is merged (it may carry a later edit)."""
        if message.chat_id != self.chat_id:
            raise ValueError("message of another chat")
        existing_seq = self._by_id.get(message.message_id, message.seq)
        current = self._by_seq.get(existing_seq)
        if current is not None:
            merged = merge(current, message)
            if merged == current:
                return Change.DUPLICATE
            self._by_seq[existing_seq] = merged
            return Change.UPDATED
        self._by_seq[message.seq] = message
        self._by_id[message.message_id] = message.seq
        self._highest = max(self._highest, message.seq)
        while self._contiguous + 1 in self._by_seq:
            self._contiguous += 1
        return Change.ADDED

    def edit(
        self,
        message_id: Key,
        seq: int,
        body: str | None,
        edited_at: datetime,
        card_text: str | None = None,
    ) -> Change:
        current = self.get(message_id)
        if current is not None and current.kind == "Card" and card_text is None:
            card_text = current.card_text  # a server without cardText in message_edited
        return self._change(
            message_id, seq, body=body, card_text=card_text, edited_at=edited_at, deleted_at=None
        )

    def delete(self, message_id: Key, seq: int, deleted_at: datetime) -> Change:
        return self._change(
            message_id, seq, body=None, card_text=None, edited_at=None, deleted_at=deleted_at
        )

    def _change(
        self,
        message_id: Key,
        seq: int,
        *,
        body: str | None,
        card_text: str | None,
        edited_at: datetime | None,
        deleted_at: datetime | None,
    ) -> Change:
        current = self.get(message_id)
        if current is None:
            # The message itself is missing: remember its seq so the gap is fetched (REST
            # returns the message in its current, edited or deleted, state).
            self._highest = max(self._highest, seq)
            return Change.UNKNOWN
        view = replace(
            current, body=body, card_text=card_text, edited_at=edited_at, deleted_at=deleted_at
        )
        merged = merge(current, view)
        if merged == current:
            return Change.DUPLICATE
        self._by_seq[current.seq] = merged
        return Change.UPDATED

    def add_history(self, messages: Iterable[TimelineMessage]) -> list[TimelineMessage]:
        """Merge a REST page; returns the messages that were new here."""
        return [m for m in messages if self.add(m) is Change.ADDED]

    def start_after(self, seq: int) -> None:
        """What comes before ``seq + 1`` is the application's to show (its own history, or
        nothing): seqs up to ``seq`` no longer count as missing. For a chat first seen live on
        an adopter's schema, and for a timeline seeded with the latest page of its history.
        Never moves back."""
        if seq > self._contiguous:
            self._contiguous = seq
            self._highest = max(self._highest, seq)
            while self._contiguous + 1 in self._by_seq:
                self._contiguous += 1

    def seed(self, messages: Iterable[TimelineMessage]) -> list[TimelineMessage]:
        """The application's own history of this chat (its latest page, or all of it): merged
        like a REST page, and what is older than its oldest message is not a gap. Returns the
        messages that were new here."""
        page = list(messages)
        if page:
            self.start_after(min(m.seq for m in page) - 1)
        return self.add_history(page)

    def read(self, user_id: Key, last_read_seq: int) -> bool:
        """A read mark; marks only move forward (a stale or repeated receipt changes nothing)."""
        if last_read_seq <= self.read_marks.get(user_id, 0):
            return False
        self.read_marks[user_id] = last_read_seq
        return True
