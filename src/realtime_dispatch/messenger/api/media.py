"""``/api/calls``, conferences, ``/api/recordings`` and ``/api/screen-shares``."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query, Request, Response

from realtime_dispatch.auth.media import MediaMinter
from realtime_dispatch.contracts.media import MediaJoin
from realtime_dispatch.contracts.rest import (
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


@router.get("/calls/{callId}", tags=["calls"], summary="A call (its parties only)")
async def get_call(call_id: CallId, user: User, conn: Conn) -> CallOut:
    return await calls.get_call(conn, call_id=call_id, viewer=user)


@router.post(
    "/calls/{callId}/media",
    tags=["calls"],
    summary="Join credentials for a party of a ringing or active call, minted now",
    responses=_MEDIA_RESPONSES,
)
async def call_media(call_id: CallId, user: User, conn: Conn, request: Request) -> MediaJoin:
    return await media_join.call_media(conn, _minter(request), call_id=call_id, user=user)


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
    return await conferences.get_conference(conn, conference_id=conference_id, viewer=user)


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


@router.get(
    "/recordings/{recordingId}",
    tags=["recordings"],
    summary="A recording (a party of its call, a member of its conference's chat)",
)
async def get_recording(recording_id: RecordingId, user: User, conn: Conn) -> RecordingOut:
    return await recordings.get_recording(conn, recording_id=recording_id, viewer=user)


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


@router.get(
    "/screen-shares/{screenShareId}",
    tags=["screen share"],
    summary="A screen share (a party of its call, a member of its conference's chat)",
)
async def get_screen_share(share_id: ShareId, user: User, conn: Conn) -> ScreenShareOut:
    return await screenshare.get_screen_share(conn, share_id=share_id, viewer=user)


@router.post(
    "/screen-shares/{screenShareId}/stop",
    status_code=204,
    response_class=Response,
    tags=["screen share"],
    summary="(sharer)",
)
async def stop_screen_share(share_id: ShareId, user: User, conn: Conn) -> None:
    await screenshare.stop_screen_share(conn, share_id=share_id, actor=user)
