"""Recordings of a call or a conference: start, stop, available, failed. Pushed like the
session's other events (Direct: both parties; Conference: the chat), ``ref_id`` = recording.

``available`` and ``failed`` are what the media pipeline reports; in this reference service any
participant of the session may report them (a production deployment would give the pipeline
its own service identity)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from uuid import UUID

from realtime_dispatch.contracts.messenger_rest import RecordingOut
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.messenger.refusals import Conflict, InvalidInput
from realtime_dispatch.messenger.sessions import (
    MediaSession,
    session_record,
    start_in_session,
    visible_session_record,
)
from realtime_dispatch.outbox.enqueue import enqueue
from realtime_dispatch.outbox.model import RealtimeDispatchKind

K = RealtimeDispatchKind
FAILURE_CODE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


start_recording = partial(
    start_in_session,
    insert="INSERT INTO messenger.call_recordings"
    " (id, session_kind, call_id, conference_id, started_by_user_id)"
    " VALUES ($1, $2, $3, $4, $5)",
    busy="a recording is already running",
    push=K.RECORDING_STARTED,
)
"""Start recording a call in progress (a party) or a live conference (a chat member)."""


async def _recording(
    conn: DbConnection, recording_id: UUID, actor: UUID, *, refuse_blocked: bool
) -> tuple[MediaSession, str]:
    row, session = await session_record(
        conn,
        "SELECT call_id, conference_id, status FROM messenger.call_recordings"
        " WHERE id = $1 FOR UPDATE",
        recording_id,
        actor,
        "recording",
        refuse_blocked=refuse_blocked,
    )
    return session, str(row["status"])


@dataclass(frozen=True, slots=True)
class RecordingStep:
    """From which statuses a recording may move on, how (``sql``: ``$1`` the recording, ``$2``
    the failure code), and what the session is pushed. Any participant of the session may take
    a step; a user blocked in it only ``stop`` (nothing of theirs reaches the blocker, and nobody
    is left unable to stop it), never report it available or failed (a code)."""

    from_statuses: tuple[str, ...]
    push: RealtimeDispatchKind
    sql: str
    blocked_may: bool = False


STEPS: dict[str, RecordingStep] = {
    "stop": RecordingStep(
        ("Recording",),
        K.RECORDING_STOPPED,
        "UPDATE messenger.call_recordings SET status = 'Stopped', stopped_at = now() WHERE id = $1",
        blocked_may=True,
    ),
    "available": RecordingStep(
        ("Stopped",),
        K.RECORDING_AVAILABLE,
        "UPDATE messenger.call_recordings SET status = 'Available', available_at = now()"
        " WHERE id = $1",
    ),
    "failed": RecordingStep(
        ("Recording", "Stopped"),
        K.RECORDING_FAILED,
        "UPDATE messenger.call_recordings SET status = 'Failed', failed_at = now(),"
        " stopped_at = coalesce(stopped_at, now()), failure_code = $2 WHERE id = $1",
    ),
}


async def _advance(
    conn: DbConnection,
    step: RecordingStep,
    *,
    recording_id: UUID,
    actor: UUID,
    args: tuple[object, ...] = (),
) -> None:
    async with conn.transaction():
        session, status = await _recording(
            conn, recording_id, actor, refuse_blocked=not step.blocked_may
        )
        if status not in step.from_statuses:
            raise Conflict(f"the recording is {status}")
        await conn.execute(step.sql, recording_id, *args)
        await enqueue(conn, *session.intents(step.push, recording_id))


async def stop_recording(conn: DbConnection, *, recording_id: UUID, actor: UUID) -> None:
    await _advance(conn, STEPS["stop"], recording_id=recording_id, actor=actor)


async def mark_recording_available(conn: DbConnection, *, recording_id: UUID, actor: UUID) -> None:
    await _advance(conn, STEPS["available"], recording_id=recording_id, actor=actor)


async def mark_recording_failed(
    conn: DbConnection, *, recording_id: UUID, actor: UUID, code: str
) -> None:
    """``code``: a short machine code (letters, digits, ``_.-``), never free text."""
    if not FAILURE_CODE.match(code):
        raise InvalidInput("code must be 1-64 letters, digits, '_', '.' or '-'")
    await _advance(conn, STEPS["failed"], recording_id=recording_id, actor=actor, args=(code,))


async def get_recording(conn: DbConnection, *, recording_id: UUID, viewer: UUID) -> RecordingOut:
    row = await visible_session_record(
        conn,
        "SELECT id AS recording_id, session_kind, call_id, conference_id, started_by_user_id,"
        " status, started_at, stopped_at, available_at, failed_at, failure_code"
        " FROM messenger.call_recordings WHERE id = $1",
        recording_id,
        viewer,
        "recording",
    )
    return RecordingOut(**dict(row))
