"""Typed values of ``messenger.realtime_outbox``: enums stored as the spec's names, and the rule
of which reference ids each kind needs, read from the kinds' catalogue (pure; shared by
``enqueue`` and the dispatcher). :class:`RealtimeDispatchKind` is defined beside the catalogue's
rows (:mod:`realtime_dispatch.values.catalogue`) and imported from here as before."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from realtime_dispatch.errors import IntentError
from realtime_dispatch.values.catalogue import CATALOGUE
from realtime_dispatch.values.catalogue import RealtimeDispatchKind as RealtimeDispatchKind  # noqa: PLC0414
from realtime_dispatch.values.keys import Key


class RealtimeTargetKind(StrEnum):
    CHAT_GROUP = "ChatGroup"
    USER = "User"


class OutboxStatus(StrEnum):
    PENDING = "Pending"
    DONE = "Done"
    QUARANTINED = "Quarantined"


class SessionKind(StrEnum):
    DIRECT = "Direct"
    CONFERENCE = "Conference"


def _kinds(target: str, ids: str | None = None) -> frozenset[RealtimeDispatchKind]:
    """The kinds whose catalogue rows have ``target`` (and ``ids``)."""
    return frozenset(
        RealtimeDispatchKind(entry.kind)
        for entry in CATALOGUE
        if entry.target == target and ids in (None, entry.ids)
    )


# The routing rule, read from the catalogue's rows.
_MESSAGE_KINDS = _kinds("chat", "message")
_CHAT_KINDS = _kinds("chat", "ref")
_USER_KINDS = _kinds("user")
_MEDIA_KINDS = _kinds("session")


def group_name(target: RealtimeTargetKind, chat_id: Key | None, user_id: Key | None) -> str:
    """The hub group a row goes to: ``chat:{ChatId}`` or ``user:{UserId}`` (the key as ``str``
    spells it, whatever REALTIME_KEY_TYPE: ``chat:17`` for a bigint key)."""
    if target is RealtimeTargetKind.CHAT_GROUP:
        if chat_id is None:
            raise IntentError("ChatGroup target needs chat_id", code="MissingChatId")
        return f"chat:{chat_id}"
    if user_id is None:
        raise IntentError("User target needs target_user_id", code="MissingTargetUserId")
    return f"user:{user_id}"


@dataclass(frozen=True, slots=True)
class OutboxIntent:
    """One push intent, as an owner enqueues it. Only ids and enums: never a body. The ids are
    the owner's keys (``REALTIME_KEY_TYPE``: UUIDs for the reference messenger)."""

    kind: RealtimeDispatchKind
    target_kind: RealtimeTargetKind
    chat_id: Key | None = None
    target_user_id: Key | None = None
    message_id: Key | None = None
    ref_id: Key | None = None
    session_kind: SessionKind | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        validate_intent(self)

    @classmethod
    def to_chat(
        cls,
        kind: RealtimeDispatchKind,
        chat_id: Key | None,
        *,
        message_id: Key | None = None,
        ref_id: Key | None = None,
        session_kind: SessionKind | None = None,
        seq: int | None = None,
    ) -> OutboxIntent:
        """An intent for ``chat:{chatId}``: every active member of the chat receives it."""
        return cls(
            kind=kind,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat_id,
            message_id=message_id,
            ref_id=ref_id,
            session_kind=session_kind,
            seq=seq,
        )

    @property
    def group(self) -> str:
        return group_name(self.target_kind, self.chat_id, self.target_user_id)


def _fail(message: str, code: str) -> IntentError:
    return IntentError(message, code=code)


_KIND_OF = {kind.value: kind for kind in RealtimeDispatchKind}
_TARGET_OF = {target.value: target for target in RealtimeTargetKind}
_SESSION_OF = {session.value: session for session in SessionKind}


def validate_intent(intent: OutboxIntent) -> None:
    """Check that ``intent`` carries the ids its kind needs; raise :class:`IntentError` if not.

    Runs for every claimed row: the checks are plain comparisons, and a reason is only
    formatted when a check fails."""
    kind = _KIND_OF.get(intent.kind) or RealtimeDispatchKind(intent.kind)
    target = _TARGET_OF.get(intent.target_kind) or RealtimeTargetKind(intent.target_kind)
    group_name(target, intent.chat_id, intent.target_user_id)
    if intent.seq is not None and intent.seq < 0:
        raise _fail("seq must be >= 0", "InvalidSeq")
    chat_group = target is RealtimeTargetKind.CHAT_GROUP
    if kind in _MESSAGE_KINDS:
        if not chat_group:
            raise _fail(f"{kind} goes to a ChatGroup", "BadTarget")
        if intent.message_id is None:
            raise _fail(f"{kind} needs message_id", "MissingMessageId")
        if intent.seq is None:
            raise _fail(f"{kind} needs seq", "MissingSeq")
    elif kind in _CHAT_KINDS:
        if not chat_group:
            raise _fail(f"{kind} goes to a ChatGroup", "BadTarget")
        if intent.ref_id is None:
            raise _fail(f"{kind} needs ref_id", "MissingRefId")
    elif kind in _USER_KINDS:
        if chat_group:
            raise _fail(f"{kind} goes to a User", "BadTarget")
        if intent.ref_id is None:
            raise _fail(f"{kind} needs ref_id", "MissingRefId")
    else:
        if intent.ref_id is None:
            raise _fail(f"{kind} needs ref_id", "MissingRefId")
        if intent.session_kind is None:
            raise _fail(f"{kind} needs session_kind", "MissingSessionKind")
        expected = (
            RealtimeTargetKind.USER
            if intent.session_kind is SessionKind.DIRECT
            else RealtimeTargetKind.CHAT_GROUP
        )
        if target is not expected:
            raise _fail(
                f"{kind} with session_kind {intent.session_kind} goes to a {expected}",
                "BadTarget",
            )
    if kind not in _MEDIA_KINDS and intent.session_kind is not None:
        raise _fail(f"{kind} takes no session_kind", "UnexpectedSessionKind")


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A row as the dispatcher claimed it (attempts already incremented)."""

    id: UUID
    kind: str
    target_kind: str
    chat_id: Key | None
    target_user_id: Key | None
    message_id: Key | None
    ref_id: Key | None
    session_kind: str | None
    seq: int | None
    attempts: int
    row_version: int
    created_at: datetime

    def intent(self) -> OutboxIntent:
        """The typed intent; raises :class:`IntentError` for a row nobody could have enqueued.

        Whether a row is valid depends only on its kind, target, session kind, which ids it
        has and the sign of its seq: a shape seen valid once is not checked again."""
        seq = self.seq
        shape = (
            self.kind,
            self.target_kind,
            self.session_kind,
            self.chat_id is None,
            self.target_user_id is None,
            self.message_id is None,
            self.ref_id is None,
            None if seq is None else seq >= 0,
        )
        if shape in _VALID_SHAPES:
            intent = object.__new__(OutboxIntent)
            fill = object.__setattr__
            fill(intent, "kind", _KIND_OF[self.kind])
            fill(intent, "target_kind", _TARGET_OF[self.target_kind])
            fill(intent, "chat_id", self.chat_id)
            fill(intent, "target_user_id", self.target_user_id)
            fill(intent, "message_id", self.message_id)
            fill(intent, "ref_id", self.ref_id)
            fill(
                intent,
                "session_kind",
                _SESSION_OF[self.session_kind] if self.session_kind else None,
            )
            fill(intent, "seq", seq)
            return intent
        try:
            intent = OutboxIntent(
                kind=_KIND_OF.get(self.kind) or RealtimeDispatchKind(self.kind),
                target_kind=_TARGET_OF.get(self.target_kind)
                or RealtimeTargetKind(self.target_kind),
                chat_id=self.chat_id,
                target_user_id=self.target_user_id,
                message_id=self.message_id,
                ref_id=self.ref_id,
                session_kind=(_SESSION_OF.get(self.session_kind) or SessionKind(self.session_kind))
                if self.session_kind
                else None,
                seq=seq,
            )
        except ValueError as exc:
            if isinstance(exc, IntentError):
                raise
            raise IntentError("unknown enum value in row", code="UnknownEnumValue") from exc
        _VALID_SHAPES.add(shape)
        return intent


# Row shapes (see ClaimedRow.intent) that passed validate_intent: at most a few hundred.
_VALID_SHAPES: set[tuple[object, ...]] = set()
