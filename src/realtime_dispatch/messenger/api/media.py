"""``/api/calls``, conferences, ``/api/recordings`` and ``/api/screen-shares``.

The commands on one session (answer a call, leave a conference, stop a recording, …) all take
the same shape, ``POST /{session}/{id}/{action}`` → 204: they stand in :data:`ACTIONS`, one row
each, naming who may do it and what is pushed; the rule itself is the command's (the call
transitions in :data:`~realtime_dispatch.messenger.calls.TRANSITIONS`, the recording steps in
:data:`~realtime_dispatch.messenger.recordings.STEPS`). The reads ``GET /{session}/{id}``
stand in :data:`VIEWS`, and starting a recording or a screen share in a call or a conference,
``POST /{session}`` → 201, in :data:`STARTS`. Starting a call or a conference, listing and
minting media keep a route each.
"""

# No ``from __future__ import annotations``: the route factories below annotate their
# endpoints with the path parameter of each session, which FastAPI reads at runtime.

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.contracts.media import MediaJoin
from realtime_dispatch.contracts.messenger_rest import (
    CallCreated,
    CallList,
    CallOut,
    ConferenceCreated,
    ConferenceOut,
    RecordingCreated,
    RecordingFailure,
    RecordingOut,
    ScreenShareCreated,
    ScreenShareOut,
    SessionRef,
    StartCall,
    UserRef,
)
from realtime_dispatch.messenger import calls, conferences, media_join, recordings, screenshare
from realtime_dispatch.messenger.api.deps import Conn, User
from realtime_dispatch.messenger.api.strict_json import StrictJsonRoute

router = APIRouter(prefix="/api", route_class=StrictJsonRoute)

CallId = Annotated[UUID, Path(alias="callId")]
ChatId = Annotated[UUID, Path(alias="chatId")]
ConferenceId = Annotated[UUID, Path(alias="conferenceId")]
RecordingId = Annotated[UUID, Path(alias="recordingId")]
ShareId = Annotated[UUID, Path(alias="screenShareId")]


@dataclass(frozen=True, slots=True)
class Session:
    """One kind of media session record as the REST paths name it."""

    path: str
    """``/calls/{callId}``: the record's path, with its id parameter."""
    alias: str
    """The id's path parameter (``callId``)."""
    keyword: str
    """The id's keyword in the owner commands (``call_id``)."""
    tag: str


CALL = Session("/calls/{callId}", "callId", "call_id", "calls")
CONFERENCE = Session("/conferences/{conferenceId}", "conferenceId", "conference_id", "conferences")
RECORDING = Session("/recordings/{recordingId}", "recordingId", "recording_id", "recordings")
SHARE = Session("/screen-shares/{screenShareId}", "screenShareId", "share_id", "screen share")

Command = Callable[..., Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Action:
    """``POST {session.path}/{action}`` → 204: ``command(conn, <id>=…, actor=user)``."""

    session: Session
    action: str
    name: str
    """The endpoint's name (the OpenAPI operation id starts with it)."""
    command: Command
    summary: str | None = None


# Who may do it and what is pushed, per row (a refusal: 404 to whoever cannot see the session,
# 403 to whoever may not act, 409 out of its state). Call pushes go to both parties, conference
# pushes to chat:{chatId}, recording and share pushes to the session's audience.
ACTIONS: tuple[Action, ...] = (
    # the callee, Ringing → Active: CallAnswered
    Action(CALL, "answer", "answer_call", calls.answer_call, "Answer (callee)"),
    # the callee, Ringing → Declined: CallDeclined
    Action(CALL, "decline", "decline_call", calls.decline_call, "Decline (callee)"),
    # the caller, Ringing → Cancelled: CallCancelled
    Action(CALL, "cancel", "cancel_call", calls.cancel_call, "Cancel (caller)"),
    # either party, Active → Ended: CallEnded
    Action(CALL, "end", "end_call", calls.end_call, "Hang up (a party)"),
    # an active member not blocked in the chat, conference Active: ConferenceParticipantJoined
    Action(CONFERENCE, "join", "join", conferences.join_conference),
    # whoever is in the room, even after leaving the chat: ConferenceParticipantLeft
    Action(CONFERENCE, "leave", "leave", conferences.leave_conference),
    # the starter, conference Active: ConferenceEnded (the room is emptied)
    Action(CONFERENCE, "end", "end", conferences.end_conference, "(starter)"),
    # a participant (a blocked one too), Recording → Stopped: RecordingStopped
    Action(RECORDING, "stop", "stop_recording", recordings.stop_recording),
    # a participant not blocked, Stopped → Available: RecordingAvailable
    Action(RECORDING, "available", "recording_available", recordings.mark_recording_available),
    # the sharer, while sharing: ScreenShareStopped
    Action(SHARE, "stop", "stop_screen_share", screenshare.stop_screen_share, "(sharer)"),
)


@dataclass(frozen=True, slots=True)
class View:
    """``GET {session.path}`` → ``model``: ``read(conn, <id>=…, viewer=user)``; 404 to whoever
    the session is not visible to. Nothing is pushed."""

    session: Session
    name: str
    read: Command
    model: type[BaseModel]
    summary: str


VIEWS: tuple[View, ...] = (
    View(CALL, "get_call", calls.get_call, CallOut, "A call (its parties only)"),
    View(
        CONFERENCE,
        "get_conference",
        conferences.get_conference,
        ConferenceOut,
        "A conference and its roster",
    ),
    View(
        RECORDING,
        "get_recording",
        recordings.get_recording,
        RecordingOut,
        "A recording (a party of its call, a member of its conference's chat)",
    ),
    View(
        SHARE,
        "get_screen_share",
        screenshare.get_screen_share,
        ScreenShareOut,
        "A screen share (a party of its call, a member of its conference's chat)",
    ),
)


@dataclass(frozen=True, slots=True)
class Start:
    """``POST {path}`` with a :class:`SessionRef` → 201 ``created``: ``command(conn, actor=user,
    call_id=…, conference_id=…)``, whose new id the answer carries as ``field``. The rule (a
    live session, the actor not blocked in it, one at a time) is the command's."""

    session: Session
    path: str
    name: str
    command: Command
    created: type[BaseModel]
    field: str
    summary: str


STARTS: tuple[Start, ...] = (
    # a party of a call in progress, a member of a live conference's chat: RecordingStarted
    Start(
        RECORDING,
        "/recordings",
        "start_recording",
        recordings.start_recording,
        RecordingCreated,
        "recording_id",
        "Record a call or conference",
    ),
    # the same, one sharer at a time: ScreenShareStarted
    Start(
        SHARE,
        "/screen-shares",
        "start_screen_share",
        screenshare.start_screen_share,
        ScreenShareCreated,
        "screen_share_id",
        "Share the caller's screen",
    ),
)


def _add_start(row: Start) -> None:
    async def endpoint(body: SessionRef, user: User, conn: Conn) -> Any:
        new_id = await row.command(
            conn, actor=user, call_id=body.call_id, conference_id=body.conference_id
        )
        return row.created(**{row.field: new_id})

    router.add_api_route(
        row.path,
        endpoint,
        methods=["POST"],
        name=row.name,
        status_code=201,
        response_model=row.created,
        tags=[row.session.tag],
        summary=row.summary,
    )


def _add_on_session(
    session: Session,
    suffix: str,
    *,
    method: str,
    name: str,
    summary: str | None,
    answer: Callable[[Conn, UUID, dict[str, UUID]], Awaitable[Any]],
    **response: Any,
) -> None:
    """``{method} {session.path}{suffix}``: ``answer(conn, user, {<id keyword>: id})``."""

    async def endpoint(
        ref: Annotated[UUID, Path(alias=session.alias)], user: User, conn: Conn
    ) -> Any:
        return await answer(conn, user, {session.keyword: ref})

    router.add_api_route(
        session.path + suffix,
        endpoint,
        methods=[method],
        name=name,
        tags=[session.tag],
        summary=summary,
        **response,
    )


def _add_action(row: Action) -> None:
    async def act(conn: Conn, user: UUID, ref: dict[str, UUID]) -> None:
        await row.command(conn, actor=user, **ref)

    _add_on_session(
        row.session,
        f"/{row.action}",
        method="POST",
        name=row.name,
        summary=row.summary,
        answer=act,
        response_model=None,
        status_code=204,
        response_class=Response,
    )


def _add_view(row: View) -> None:
    async def read(conn: Conn, user: UUID, ref: dict[str, UUID]) -> object:
        return await row.read(conn, viewer=user, **ref)

    _add_on_session(
        row.session,
        "",
        method="GET",
        name=row.name,
        summary=row.summary,
        answer=read,
        response_model=row.model,
    )


# calls ---------------------------------------------------------------------------------------


@router.post("/calls", status_code=201, tags=["calls"], summary="Call a user (rings them)")
async def start_call(body: StartCall, user: User, conn: Conn) -> CallCreated:
    call_id = await calls.start_call(conn, caller=user, callee=body.callee_user_id)
    return CallCreated(call_id=call_id)


def _minter(request: Request) -> MediaMinter:
    minter: MediaMinter = request.app.state.minter
    return minter


_MEDIA_RESPONSES: dict[int | str, dict[str, object]] = {
    503: {"description": "No media secret is configured: nothing can be minted"}
}


@router.get("/calls", tags=["calls"], summary="The caller's calls in a status, newest first")
async def list_calls(
    user: User,
    conn: Conn,
    status: Annotated[list[Literal["Ringing", "Active"]] | None, Query()] = None,
) -> CallList:
    statuses = tuple(dict.fromkeys(status)) if status else calls.LIVE_STATUSES
    return CallList(items=await calls.list_calls(conn, user=user, statuses=statuses))


@router.post(
    "/calls/{callId}/media",
    tags=["calls"],
    summary="Join credentials for a party of a ringing or active call, minted now",
    responses=_MEDIA_RESPONSES,
)
async def call_media(call_id: CallId, user: User, conn: Conn, request: Request) -> MediaJoin:
    return await media_join.call_media(conn, _minter(request), call_id=call_id, user=user)


# conferences ---------------------------------------------------------------------------------


@router.post(
    "/chats/{chatId}/conferences",
    status_code=201,
    tags=["conferences"],
    summary="Start the chat's conference (a member; the caller joins it)",
)
async def start_conference(chat_id: ChatId, user: User, conn: Conn) -> ConferenceCreated:
    conference_id = await conferences.start_conference(conn, chat_id=chat_id, actor=user)
    return ConferenceCreated(conference_id=conference_id)


@router.get(
    "/chats/{chatId}/conference",
    tags=["conferences"],
    summary="The chat's live conference with its roster, or 404",
)
async def live_conference(chat_id: ChatId, user: User, conn: Conn) -> ConferenceOut:
    return await conferences.live_conference(conn, chat_id=chat_id, viewer=user)


@router.post(
    "/conferences/{conferenceId}/media",
    tags=["conferences"],
    summary="Join credentials for an active member of a live conference's chat, minted now",
    responses=_MEDIA_RESPONSES,
)
async def conference_media(
    conference_id: ConferenceId, user: User, conn: Conn, request: Request
) -> MediaJoin:
    return await media_join.conference_media(
        conn, _minter(request), conference_id=conference_id, user=user
    )


@router.post(
    "/conferences/{conferenceId}/invite",
    status_code=204,
    response_class=Response,
    tags=["conferences"],
    summary="Invite a member of the chat",
)
async def invite(conference_id: ConferenceId, body: UserRef, user: User, conn: Conn) -> None:
    await conferences.invite_to_conference(
        conn, conference_id=conference_id, actor=user, user_id=body.user_id
    )


# recordings and screen share -----------------------------------------------------------------


@router.post(
    "/recordings/{recordingId}/failed",
    status_code=204,
    response_class=Response,
    tags=["recordings"],
)
async def recording_failed(
    recording_id: RecordingId, body: RecordingFailure, user: User, conn: Conn
) -> None:
    await recordings.mark_recording_failed(
        conn, recording_id=recording_id, actor=user, code=body.code
    )


for _start in STARTS:
    _add_start(_start)
for _action in ACTIONS:
    _add_action(_action)
for _view in VIEWS:
    _add_view(_view)
