"""Request and response bodies of the reference messenger's REST API (``/api/chats…``,
``/api/contacts…``, calls, conferences, recordings): camelCase on the wire, unknown fields
refused, text trimmed and bounded. The messenger's routes validate with them and the client SDKs
parse with them; the rules of what each message kind may carry live here, for both.

Part of the reference app, not of the pipeline: no pipeline package imports this module (the
``pipeline`` contract in ``pyproject.toml``). The pipeline's own REST body, the ``GET /api/sync``
page, is :mod:`.sync`."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Self
from uuid import UUID

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from realtime_dispatch.contracts.base import ApiModel

Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Body = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
FailureCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
CardText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
ShortText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
ClientMessageId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
ContentType = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,127}$")
]


class MessageKind(StrEnum):
    TEXT = "Text"
    FILE = "File"
    CARD = "Card"


# Each kind's required field, and the optional ones it also allows (wire names).
_REQUIRED = {MessageKind.TEXT: "body", MessageKind.FILE: "fileMeta", MessageKind.CARD: "cardText"}
_OPTIONAL = {MessageKind.TEXT: (), MessageKind.FILE: ("body",), MessageKind.CARD: ()}
CONTENT_FIELDS = ("body", "fileMeta", "cardText")


def content_problems(kind: MessageKind, given: set[str]) -> list[tuple[str, str]]:
    """``(field, "missing" | "not_allowed")`` for content fields that do not fit ``kind``."""
    required = _REQUIRED[kind]
    problems = [] if required in given else [(required, "missing")]
    allowed = {required, *_OPTIONAL[kind]}
    return problems + [(f, "not_allowed") for f in CONTENT_FIELDS if f in given - allowed]


# requests ------------------------------------------------------------------------------------


class CreateChat(ApiModel):
    title: Title
    member_user_ids: list[UUID] = Field(default_factory=list, max_length=200)


class RenameChat(ApiModel):
    title: Title


class UserRef(ApiModel):
    user_id: UUID


class FileMeta(ApiModel):
    """A file stored elsewhere (this service stores only its description)."""

    file_id: ShortText
    name: ShortText
    size: int = Field(ge=0, le=2**53)
    content_type: ContentType


class SendMessage(ApiModel):
    """Text: ``{"body"}``; File: ``{"kind":"File","fileMeta","body"?}``; Card:
    ``{"kind":"Card","cardText"}``. ``clientMessageId`` makes the send idempotent."""

    kind: Literal["Text", "File", "Card"] = "Text"
    body: Body | None = None
    file_meta: FileMeta | None = None
    card_text: CardText | None = None
    client_message_id: ClientMessageId | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _fits_kind(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> SendMessage:
        """Field errors and the kind's rules reported together, each at its field."""
        errors: list[InitErrorDetails] = []
        try:
            model: SendMessage = handler(data)
        except ValidationError as exc:
            errors = [_details(e) for e in exc.errors()]
        raw_kind = data.get("kind", "Text") if isinstance(data, dict) else None
        if isinstance(data, dict) and isinstance(raw_kind, str) and raw_kind in _KIND_VALUES:
            kind = MessageKind(raw_kind)
            given = {f for f in CONTENT_FIELDS if data.get(f) is not None}
            for field, problem in content_problems(kind, given):
                error = (
                    PydanticCustomError(
                        "missing", "Field required for a {kind} message", {"kind": kind.value}
                    )
                    if problem == "missing"
                    else PydanticCustomError(
                        "not_allowed", "Not allowed in a {kind} message", {"kind": kind.value}
                    )
                )
                if not any(e["loc"][:1] == (field,) for e in errors):
                    errors.append(InitErrorDetails(type=error, loc=(field,), input=data))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return model


_KIND_VALUES = frozenset(k.value for k in MessageKind)


def _details(error: Any) -> InitErrorDetails:
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details


class _OneOf(ApiModel):
    """A request that takes exactly one of the two fields ``one_of`` names; the refusal names
    them as the JSON does."""

    one_of: ClassVar[tuple[str, str]]

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        first, second = self.one_of
        if (getattr(self, first) is None) == (getattr(self, second) is None):
            raise ValueError(f"give exactly one of {to_camel(first)} and {to_camel(second)}")
        return self


class EditMessage(_OneOf):
    """A Text message takes ``body``, a Card message ``cardText``."""

    one_of = ("body", "card_text")
    body: Body | None = None
    card_text: CardText | None = None


class ReadMark(ApiModel):
    seq: int = Field(ge=0)


class StartCall(ApiModel):
    callee_user_id: UUID


class SessionRef(_OneOf):
    """A 1:1 call or a conference: exactly one of the two."""

    one_of = ("call_id", "conference_id")
    call_id: UUID | None = None
    conference_id: UUID | None = None


class RecordingFailure(ApiModel):
    code: FailureCode


# responses -----------------------------------------------------------------------------------


class ChatCreated(ApiModel):
    chat_id: UUID


class ParticipantOut(ApiModel):
    user_id: UUID
    active: bool
    read_seq: int = 0


class ChatOut(ApiModel):
    chat_id: UUID
    title: str
    participants: list[ParticipantOut]
    last_seq: int


class MessageSent(ApiModel):
    message_id: UUID
    seq: int
    sent_at: datetime


class MessageEditedReply(ApiModel):
    """The answer to an edit."""

    message_id: UUID
    edited_at: datetime


class MessageOut(ApiModel):
    message_id: UUID
    seq: int
    sender_user_id: UUID | None
    body: str | None
    sent_at: datetime
    edited_at: datetime | None
    deleted_at: datetime | None
    kind: str = "Text"
    file_meta: dict[str, Any] | None = None
    card_text: str | None = None


class MessagePage(ApiModel):
    items: list[MessageOut]


class ChatSummaryOut(ApiModel):
    chat_id: UUID
    title: str
    last_seq: int
    read_seq: int
    updated_at: datetime


class ChatPage(ApiModel):
    items: list[ChatSummaryOut]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last page."
    )


class ContactRequestCreated(ApiModel):
    request_id: UUID


class ContactCreated(ApiModel):
    contact_id: UUID


class ContactOut(ApiModel):
    contact_id: UUID
    user_id: UUID
    since: datetime


class ContactList(ApiModel):
    items: list[ContactOut]


class ContactRequestOut(ApiModel):
    request_id: UUID
    from_user_id: UUID
    to_user_id: UUID
    created_at: datetime


class ContactRequestList(ApiModel):
    items: list[ContactRequestOut]


class BlockCreated(ApiModel):
    entry_id: UUID


class BlockedOut(ApiModel):
    entry_id: UUID
    user_id: UUID
    since: datetime


class BlockedList(ApiModel):
    items: list[BlockedOut]


class CallCreated(ApiModel):
    call_id: UUID


class CallOut(ApiModel):
    call_id: UUID
    caller_user_id: UUID
    callee_user_id: UUID
    room_name: str
    status: str
    created_at: datetime
    answered_at: datetime | None
    ended_at: datetime | None


class CallList(ApiModel):
    items: list[CallOut]


class ConferenceCreated(ApiModel):
    conference_id: UUID


class RosterOut(ApiModel):
    user_id: UUID
    status: str


class ConferenceOut(ApiModel):
    conference_id: UUID
    chat_id: UUID
    room_name: str
    status: str
    started_by_user_id: UUID
    started_at: datetime
    ended_at: datetime | None
    roster: list[RosterOut]


class RecordingCreated(ApiModel):
    recording_id: UUID


class ScreenShareCreated(ApiModel):
    screen_share_id: UUID


class RecordingOut(ApiModel):
    recording_id: UUID
    session_kind: str
    call_id: UUID | None
    conference_id: UUID | None
    started_by_user_id: UUID
    status: str
    started_at: datetime
    stopped_at: datetime | None
    available_at: datetime | None
    failed_at: datetime | None
    failure_code: str | None


class ScreenShareOut(ApiModel):
    screen_share_id: UUID
    session_kind: str
    call_id: UUID | None
    conference_id: UUID | None
    user_id: UUID
    started_at: datetime
    stopped_at: datetime | None
