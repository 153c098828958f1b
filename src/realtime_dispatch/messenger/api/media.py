"""``/api/calls``, conferences, ``/api/recordings`` and ``/api/screen-shares``."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Response

from realtime_dispatch.messenger import calls, conferences, recordings, screenshare
from realtime_dispatch.messenger.api.deps import Conn, User
from realtime_dispatch.messenger.api.schemas import (
    CallCreated,
    CallOut,
    ConferenceCreated,
    ConferenceOut,
    RecordingCreated,
    RecordingFailure,
    RosterOut,
    ScreenShareCreated,
    SessionRef,
    StartCall,
    UserRef,
)

router = APIRouter(prefix="/api")

CallId = Annotated[UUID, Path(alias="callId")]
ChatId = Annotated[UUID, Path(alias="chatId")]
ConferenceId = Annotated[UUID, Path(alias="conferenceId")]
RecordingId = Annotated[UUID, Path(alias="recordingId")]
ShareId = Annotated[UUID, Path(alias="screenShareId")]


# calls ---------------------------------------------------------------------------------------


@router.post("/calls", status_code=201, tags=["calls"], summary="Call a user (rings them)")
async def start_call(body: StartCall, user: User, conn: Conn) -> CallCreated:
    call_id = await calls.start_call(conn, caller=user, callee=body.callee_user_id)
    return CallCreated(call_id=call_id)


@router.get("/calls/{callId}", tags=["calls"], summary="A call (its parties only)")
async def get_call(call_id: CallId, user: User, conn: Conn) -> CallOut:
    v = await calls.get_call(conn, call_id=call_id, viewer=user)
    return CallOut(
        call_id=v.call_id,
        caller_user_id=v.caller_user_id,
        callee_user_id=v.callee_user_id,
        room_name=v.room_name,
        status=v.status,
        created_at=v.created_at,
        answered_at=v.answered_at,
        ended_at=v.ended_at,
    )


@router.post(
    "/calls/{callId}/answer",
    status_code=204,
    response_class=Response,
    tags=["calls"],
    summary="Answer (callee)",
)
async def answer_call(call_id: CallId, user: User, conn: Conn) -> None:
    await calls.answer_call(conn, call_id=call_id, actor=user)


@router.post(
    "/calls/{callId}/decline",
    status_code=204,
    response_class=Response,
    tags=["calls"],
    summary="Decline (callee)",
)
async def decline_call(call_id: CallId, user: User, conn: Conn) -> None:
    await calls.decline_call(conn, call_id=call_id, actor=user)


@router.post(
    "/calls/{callId}/cancel",
    status_code=204,
    response_class=Response,
    tags=["calls"],
    summary="Cancel (caller)",
)
async def cancel_call(call_id: CallId, user: User, conn: Conn) -> None:
    await calls.cancel_call(conn, call_id=call_id, actor=user)


@router.post(
    "/calls/{callId}/end",
    status_code=204,
    response_class=Response,
    tags=["calls"],
    summary="Hang up (a party)",
)
async def end_call(call_id: CallId, user: User, conn: Conn) -> None:
    await calls.end_call(conn, call_id=call_id, actor=user)


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
    "/conferences/{conferenceId}", tags=["conferences"], summary="A conference and its roster"
)
async def get_conference(conference_id: ConferenceId, user: User, conn: Conn) -> ConferenceOut:
    v = await conferences.get_conference(conn, conference_id=conference_id, viewer=user)
    return ConferenceOut(
        conference_id=v.conference_id,
        chat_id=v.chat_id,
        room_name=v.room_name,
        status=v.status,
        started_by_user_id=v.started_by_user_id,
        started_at=v.started_at,
        ended_at=v.ended_at,
        roster=[RosterOut(user_id=e.user_id, status=e.status) for e in v.roster],
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


@router.post(
    "/conferences/{conferenceId}/join",
    status_code=204,
    response_class=Response,
    tags=["conferences"],
)
async def join(conference_id: ConferenceId, user: User, conn: Conn) -> None:
    await conferences.join_conference(conn, conference_id=conference_id, actor=user)


@router.post(
    "/conferences/{conferenceId}/leave",
    status_code=204,
    response_class=Response,
    tags=["conferences"],
)
async def leave(conference_id: ConferenceId, user: User, conn: Conn) -> None:
    await conferences.leave_conference(conn, conference_id=conference_id, actor=user)


@router.post(
    "/conferences/{conferenceId}/end",
    status_code=204,
    response_class=Response,
    tags=["conferences"],
    summary="(starter)",
)
async def end(conference_id: ConferenceId, user: User, conn: Conn) -> None:
    await conferences.end_conference(conn, conference_id=conference_id, actor=user)


# recordings and screen share -----------------------------------------------------------------


@router.post(
    "/recordings", status_code=201, tags=["recordings"], summary="Record a call or conference"
)
async def start_recording(body: SessionRef, user: User, conn: Conn) -> RecordingCreated:
    recording_id = await recordings.start_recording(
        conn, actor=user, call_id=body.call_id, conference_id=body.conference_id
    )
    return RecordingCreated(recording_id=recording_id)


@router.post(
    "/recordings/{recordingId}/stop", status_code=204, response_class=Response, tags=["recordings"]
)
async def stop_recording(recording_id: RecordingId, user: User, conn: Conn) -> None:
    await recordings.stop_recording(conn, recording_id=recording_id, actor=user)


@router.post(
    "/recordings/{recordingId}/available",
    status_code=204,
    response_class=Response,
    tags=["recordings"],
)
async def recording_available(recording_id: RecordingId, user: User, conn: Conn) -> None:
    await recordings.mark_recording_available(conn, recording_id=recording_id, actor=user)


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


@router.post(
    "/screen-shares", status_code=201, tags=["screen share"], summary="Share the caller's screen"
)
async def start_screen_share(body: SessionRef, user: User, conn: Conn) -> ScreenShareCreated:
    share_id = await screenshare.start_screen_share(
        conn, actor=user, call_id=body.call_id, conference_id=body.conference_id
    )
    return ScreenShareCreated(screen_share_id=share_id)


@router.post(
    "/screen-shares/{screenShareId}/stop",
    status_code=204,
    response_class=Response,
    tags=["screen share"],
    summary="(sharer)",
)
async def stop_screen_share(share_id: ShareId, user: User, conn: Conn) -> None:
    await screenshare.stop_screen_share(conn, share_id=share_id, actor=user)
