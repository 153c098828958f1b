"""Request and response bodies of the REST API: camelCase on the wire, unknown fields refused,
text trimmed and bounded."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Body = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
FailureCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# requests ------------------------------------------------------------------------------------


class CreateChat(ApiModel):
    title: Title
    member_user_ids: list[UUID] = Field(default_factory=list, max_length=200)


class RenameChat(ApiModel):
    title: Title


class UserRef(ApiModel):
    user_id: UUID


class MessageBody(ApiModel):
    body: Body


class ReadMark(ApiModel):
    seq: int = Field(ge=0)


class StartCall(ApiModel):
    callee_user_id: UUID


class SessionRef(ApiModel):
    """A 1:1 call or a conference: exactly one of the two."""

    call_id: UUID | None = None
    conference_id: UUID | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SessionRef:
        if (self.call_id is None) == (self.conference_id is None):
            raise ValueError("give exactly one of callId and conferenceId")
        return self


class RecordingFailure(ApiModel):
    code: FailureCode


# responses -----------------------------------------------------------------------------------


class ChatCreated(ApiModel):
    chat_id: UUID


class ParticipantOut(ApiModel):
    user_id: UUID
    active: bool


class ChatOut(ApiModel):
    chat_id: UUID
    title: str
    participants: list[ParticipantOut]
    last_seq: int


class MessageSent(ApiModel):
    message_id: UUID
    seq: int
    sent_at: datetime


class MessageEdited(ApiModel):
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


class MessagePage(ApiModel):
    items: list[MessageOut]


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
