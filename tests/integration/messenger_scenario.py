"""One scenario through the reference owner service that produces every one of the 26 kinds,
as a list of steps. The command tests run it without a dispatcher (rows, same transaction,
rollback); the delivery tests run it against a real hub and dispatcher (who receives what).

Cast: alice creates the chat with bob and carol; eve is added and removed again; dave is in no
chat and no call (an outsider connected to the same hub).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx

from realtime_dispatch.messenger import (
    blacklist,
    calls,
    chats,
    conferences,
    contacts,
    messages,
    reads,
    recordings,
    screenshare,
)
from realtime_dispatch.messenger.reaper import reap_unanswered_calls
from realtime_dispatch.outbox.model import RealtimeDispatchKind, SessionKind
from support.hub_wire import make_token

K = RealtimeDispatchKind
D = SessionKind.DIRECT
C = SessionKind.CONFERENCE

# Which domain table each kind's reference id points into (message kinds: message_id).
DOMAIN_TABLE: dict[RealtimeDispatchKind, str] = {
    K.MESSAGE_RECEIVED: "messages",
    K.MESSAGE_EDITED: "messages",
    K.MESSAGE_DELETED: "messages",
    K.READ_RECEIPT_UPDATED: "participants",
    K.CHAT_UPDATED: "chat_events",
    K.CONTACT_REQUEST_RECEIVED: "contact_requests",
    K.CONTACT_REQUEST_ACCEPTED: "contacts",
    K.CONTACT_REMOVED: "contacts",
    K.BLACKLIST_CHANGED: "blacklist",
    K.CALL_INVITED: "call_sessions",
    K.CALL_ANSWERED: "call_sessions",
    K.CALL_DECLINED: "call_sessions",
    K.CALL_MISSED: "call_sessions",
    K.CALL_CANCELLED: "call_sessions",
    K.CALL_ENDED: "call_sessions",
    K.CONFERENCE_INVITED: "conference_participants",
    K.CONFERENCE_STARTED: "conference_sessions",
    K.CONFERENCE_ENDED: "conference_sessions",
    K.CONFERENCE_PARTICIPANT_JOINED: "conference_participants",
    K.CONFERENCE_PARTICIPANT_LEFT: "conference_participants",
    K.RECORDING_STARTED: "call_recordings",
    K.RECORDING_STOPPED: "call_recordings",
    K.RECORDING_AVAILABLE: "call_recordings",
    K.RECORDING_FAILED: "call_recordings",
    K.SCREEN_SHARE_STARTED: "screen_shares",
    K.SCREEN_SHARE_STOPPED: "screen_shares",
}


@dataclass
class Ctx:
    pool: asyncpg.Pool
    alice: UUID = field(default_factory=uuid4)
    bob: UUID = field(default_factory=uuid4)
    carol: UUID = field(default_factory=uuid4)
    eve: UUID = field(default_factory=uuid4)
    dave: UUID = field(default_factory=uuid4)
    ids: dict[str, UUID] = field(default_factory=dict)

    @property
    def users(self) -> dict[str, UUID]:
        return {n: getattr(self, n) for n in ("alice", "bob", "carol", "eve", "dave")}

    @property
    def chat(self) -> str:
        return f"chat:{self.ids['chat']}"

    def user(self, name: str) -> str:
        return f"user:{self.users[name]}"

    async def setup(self) -> None:
        """The chat, created by alice with bob and carol: :data:`CREATED`."""
        async with self.pool.acquire() as conn:
            await CREATED.run(self, conn)


Expected = list[tuple[RealtimeDispatchKind, str, SessionKind | None]]
Check = Callable[[Ctx, str, dict[str, Any]], None]  # (ctx, receiving user's name, payload)


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Ctx, asyncpg.pool.PoolConnectionProxy], Awaitable[object]]
    expect: Callable[[Ctx], Expected]
    check: Check = lambda _ctx, _who, _payload: None


def _keep(name: str, ctx: Ctx, value: object) -> None:
    assert isinstance(value, UUID)
    ctx.ids[name] = value


def s(value: UUID) -> str:
    return str(value)


async def _send(ctx: Ctx, conn: Any) -> None:
    sent = await messages.send_message(conn, chat_id=ctx.ids["chat"], sender=ctx.alice, body="hi")
    ctx.ids["message"] = sent.message_id


async def _start_call(ctx: Ctx, conn: Any, caller: str, callee: str) -> None:
    call_id = await calls.start_call(conn, caller=ctx.users[caller], callee=ctx.users[callee])
    ctx.ids["call"] = call_id


def _both(ctx: Ctx, kind: RealtimeDispatchKind, callee: str, caller: str) -> Expected:
    return [(kind, ctx.user(callee), D), (kind, ctx.user(caller), D)]


def _check_message(ctx: Ctx, _who: str, p: dict[str, Any]) -> None:
    assert p["chatId"] == s(ctx.ids["chat"])
    assert p["messageId"] == s(ctx.ids["message"])
    assert p["seq"] == 1


def _check_call(ctx: Ctx, _who: str, p: dict[str, Any]) -> None:
    assert p["callId"] == s(ctx.ids["call"])


def _check_invite(ctx: Ctx, who: str, p: dict[str, Any]) -> None:
    _check_call(ctx, who, p)
    media = p["media"]
    assert media["roomName"] == p["roomName"]
    assert media["accessToken"]
    assert media["iceServers"]
    assert media["iceServers"][0]["username"].endswith(f":{ctx.users[who]}")


def _check_conference(ctx: Ctx, _who: str, p: dict[str, Any]) -> None:
    assert p["conferenceId"] == s(ctx.ids["conference"])
    assert p["chatId"] == s(ctx.ids["chat"])


def _check_conference_media(ctx: Ctx, who: str, p: dict[str, Any]) -> None:
    _check_conference(ctx, who, p)
    assert p["media"]["roomName"] == p["roomName"]
    assert p["media"]["iceServers"][0]["username"].endswith(f":{ctx.ids['chat']}")


def _check_session(key: str, kind: str, id_field: str) -> Check:
    def check(ctx: Ctx, _who: str, p: dict[str, Any]) -> None:
        assert p[id_field] == s(ctx.ids[key])
        assert p["sessionKind"] == kind
        if kind == "Direct":
            assert p["callId"] == s(ctx.ids["call"])
            assert "chatId" not in p
        else:
            assert p["conferenceId"] == s(ctx.ids["conference"])
            assert p["chatId"] == s(ctx.ids["chat"])

    return check


def _chat_event(kind: str, actor: str | None, subject: str | None) -> Check:
    def check(ctx: Ctx, _who: str, p: dict[str, Any]) -> None:
        assert p["chatId"] == s(ctx.ids["chat"])
        assert p["eventKind"] == kind
        assert p.get("actorUserId") == (s(ctx.users[actor]) if actor else None)
        assert p.get("subjectUserId") == (s(ctx.users[subject]) if subject else None)

    return check


def all_of(*checks: Check) -> Check:
    def check(ctx: Ctx, who: str, payload: dict[str, Any]) -> None:
        for one in checks:
            one(ctx, who, payload)

    return check


def has(fields: Callable[[Ctx], dict[str, object]]) -> Check:
    """The payload holds these fields with these values (``None``: the field is absent)."""

    def check(ctx: Ctx, _who: str, payload: dict[str, Any]) -> None:
        for key, value in fields(ctx).items():
            assert payload.get(key) == value, (key, payload.get(key), value)

    return check


async def _create_chat(ctx: Ctx, conn: Any) -> None:
    ctx.ids["chat"] = await chats.create_chat(
        conn, creator=ctx.alice, title="deal 42", members=[ctx.bob, ctx.carol]
    )


CREATED = Step(
    "create chat",
    _create_chat,
    lambda c: [(K.CHAT_UPDATED, c.chat, None)],
    _chat_event("ChatCreated", "alice", None),
)
"""The setup's step (:meth:`Ctx.setup`): the chat's creation pushes its ``ChatCreated`` to the
first members."""


def _steps() -> list[Step]:
    chat = lambda c: c.ids["chat"]  # noqa: E731
    return [
        Step(
            "send",
            _send,
            lambda c: [(K.MESSAGE_RECEIVED, c.chat, None)],
            all_of(_check_message, has(lambda c: {"body": "hi", "senderUserId": s(c.alice)})),
        ),
        Step(
            "edit",
            lambda c, conn: messages.edit_message(
                conn, chat_id=chat(c), message_id=c.ids["message"], editor=c.alice, body="hey"
            ),
            lambda c: [(K.MESSAGE_EDITED, c.chat, None)],
            _check_message,
        ),
        Step(
            "read",
            lambda c, conn: reads.mark_read(conn, chat_id=chat(c), user_id=c.bob, seq=1),
            lambda c: [(K.READ_RECEIPT_UPDATED, c.chat, None)],
            has(lambda c: {"userId": s(c.bob), "lastReadSeq": 1, "chatId": s(chat(c))}),
        ),
        Step(
            "add eve",
            lambda c, conn: chats.add_participant(
                conn, chat_id=chat(c), actor=c.alice, user_id=c.eve
            ),
            lambda c: [(K.CHAT_UPDATED, c.chat, None)],
            _chat_event("MemberAdded", "alice", "eve"),
        ),
        Step(
            "remove eve",
            lambda c, conn: chats.remove_participant(
                conn, chat_id=chat(c), actor=c.alice, user_id=c.eve
            ),
            lambda c: [(K.CHAT_UPDATED, c.chat, None)],
            _chat_event("MemberRemoved", "alice", "eve"),
        ),
        Step(
            "rename",
            lambda c, conn: chats.rename_chat(conn, chat_id=chat(c), actor=c.carol, title="deal"),
            lambda c: [(K.CHAT_UPDATED, c.chat, None)],
            _chat_event("TitleChanged", "carol", None),
        ),
        Step(
            "delete",
            lambda c, conn: messages.delete_message(
                conn, chat_id=chat(c), message_id=c.ids["message"], actor=c.alice
            ),
            lambda c: [(K.MESSAGE_DELETED, c.chat, None)],
            all_of(_check_message, has(lambda c: {"body": None})),
        ),
        Step(
            "contact request",
            lambda c, conn: _store(
                c, "request", contacts.request_contact(conn, requester=c.alice, addressee=c.bob)
            ),
            lambda c: [(K.CONTACT_REQUEST_RECEIVED, c.user("bob"), None)],
            has(
                lambda c: {
                    "requestId": s(c.ids["request"]),
                    "fromUserId": s(c.alice),
                    "toUserId": s(c.bob),
                    "status": "Pending",
                }
            ),
        ),
        Step(
            "contact accept",
            lambda c, conn: _store(
                c,
                "contact",
                contacts.accept_contact(conn, request_id=c.ids["request"], actor=c.bob),
            ),
            lambda c: [(K.CONTACT_REQUEST_ACCEPTED, c.user("alice"), None)],
            has(
                lambda c: {
                    "contactId": s(c.ids["contact"]),
                    "requestId": s(c.ids["request"]),
                    "acceptedByUserId": s(c.bob),
                }
            ),
        ),
        Step(
            "contact remove",
            lambda c, conn: contacts.remove_contact(conn, actor=c.bob, other=c.alice),
            lambda c: [(K.CONTACT_REMOVED, c.user("alice"), None)],
            has(lambda c: {"contactId": s(c.ids["contact"]), "removedByUserId": s(c.bob)}),
        ),
        Step(
            "block",
            lambda c, conn: _store(
                c, "entry", blacklist.block_user(conn, owner=c.carol, blocked=c.dave)
            ),
            lambda c: [(K.BLACKLIST_CHANGED, c.user("carol"), None)],
            has(lambda c: {"blockedUserId": s(c.dave), "blocked": True}),
        ),
        Step(
            "unblock",
            lambda c, conn: blacklist.unblock_user(conn, owner=c.carol, blocked=c.dave),
            lambda c: [(K.BLACKLIST_CHANGED, c.user("carol"), None)],
            has(lambda c: {"entryId": s(c.ids["entry"]), "blocked": False}),
        ),
        Step(
            "call alice→bob",
            lambda c, conn: _start_call(c, conn, "alice", "bob"),
            lambda c: _both(c, K.CALL_INVITED, "bob", "alice"),
            _check_invite,
        ),
        Step(
            "answer",
            lambda c, conn: calls.answer_call(conn, call_id=c.ids["call"], actor=c.bob),
            lambda c: _both(c, K.CALL_ANSWERED, "bob", "alice"),
            _check_call,
        ),
        Step(
            "share screen in call",
            lambda c, conn: _store(
                c,
                "share",
                screenshare.start_screen_share(conn, actor=c.alice, call_id=c.ids["call"]),
            ),
            lambda c: _both(c, K.SCREEN_SHARE_STARTED, "bob", "alice"),
            _check_session("share", "Direct", "screenShareId"),
        ),
        Step(
            "stop sharing in call",
            lambda c, conn: screenshare.stop_screen_share(
                conn, share_id=c.ids["share"], actor=c.alice
            ),
            lambda c: _both(c, K.SCREEN_SHARE_STOPPED, "bob", "alice"),
            _check_session("share", "Direct", "screenShareId"),
        ),
        Step(
            "record call",
            lambda c, conn: _store(
                c, "recording", recordings.start_recording(conn, actor=c.bob, call_id=c.ids["call"])
            ),
            lambda c: _both(c, K.RECORDING_STARTED, "bob", "alice"),
            _check_session("recording", "Direct", "recordingId"),
        ),
        Step(
            "stop recording call",
            lambda c, conn: recordings.stop_recording(
                conn, recording_id=c.ids["recording"], actor=c.bob
            ),
            lambda c: _both(c, K.RECORDING_STOPPED, "bob", "alice"),
            _check_session("recording", "Direct", "recordingId"),
        ),
        Step(
            "call recording available",
            lambda c, conn: recordings.mark_recording_available(
                conn, recording_id=c.ids["recording"], actor=c.alice
            ),
            lambda c: _both(c, K.RECORDING_AVAILABLE, "bob", "alice"),
            _check_session("recording", "Direct", "recordingId"),
        ),
        Step(
            "end call",
            lambda c, conn: calls.end_call(conn, call_id=c.ids["call"], actor=c.bob),
            lambda c: _both(c, K.CALL_ENDED, "bob", "alice"),
            all_of(_check_call, has(lambda c: {"endedByUserId": s(c.bob)})),
        ),
        Step(
            "call alice→carol",
            lambda c, conn: _start_call(c, conn, "alice", "carol"),
            lambda c: _both(c, K.CALL_INVITED, "carol", "alice"),
            _check_invite,
        ),
        Step(
            "decline",
            lambda c, conn: calls.decline_call(conn, call_id=c.ids["call"], actor=c.carol),
            lambda c: _both(c, K.CALL_DECLINED, "carol", "alice"),
            _check_call,
        ),
        Step(
            "call bob→alice",
            lambda c, conn: _start_call(c, conn, "bob", "alice"),
            lambda c: _both(c, K.CALL_INVITED, "alice", "bob"),
            _check_invite,
        ),
        Step(
            "cancel",
            lambda c, conn: calls.cancel_call(conn, call_id=c.ids["call"], actor=c.bob),
            lambda c: _both(c, K.CALL_CANCELLED, "alice", "bob"),
            _check_call,
        ),
        Step(
            "call carol→bob",
            lambda c, conn: _start_call(c, conn, "carol", "bob"),
            lambda c: _both(c, K.CALL_INVITED, "bob", "carol"),
            _check_invite,
        ),
        Step(
            "reaper",
            _reap,
            lambda c: _both(c, K.CALL_MISSED, "bob", "carol"),
            _check_call,
        ),
        Step(
            "start conference",
            lambda c, conn: _store(
                c, "conference", conferences.start_conference(conn, chat_id=chat(c), actor=c.alice)
            ),
            lambda c: [(K.CONFERENCE_STARTED, c.chat, C)],
            _check_conference_media,
        ),
        Step(
            "invite bob",
            lambda c, conn: conferences.invite_to_conference(
                conn, conference_id=c.ids["conference"], actor=c.alice, user_id=c.bob
            ),
            lambda c: [(K.CONFERENCE_INVITED, c.chat, C)],
            all_of(
                _check_conference_media,
                has(lambda c: {"invitedUserId": s(c.bob), "invitedByUserId": s(c.alice)}),
            ),
        ),
        Step(
            "bob joins",
            lambda c, conn: conferences.join_conference(
                conn, conference_id=c.ids["conference"], actor=c.bob
            ),
            lambda c: [(K.CONFERENCE_PARTICIPANT_JOINED, c.chat, C)],
            all_of(_check_conference, has(lambda c: {"userId": s(c.bob)})),
        ),
        Step(
            "share screen in conference",
            lambda c, conn: _store(
                c,
                "share",
                screenshare.start_screen_share(
                    conn, actor=c.bob, conference_id=c.ids["conference"]
                ),
            ),
            lambda c: [(K.SCREEN_SHARE_STARTED, c.chat, C)],
            _check_session("share", "Conference", "screenShareId"),
        ),
        Step(
            "stop sharing in conference",
            lambda c, conn: screenshare.stop_screen_share(
                conn, share_id=c.ids["share"], actor=c.bob
            ),
            lambda c: [(K.SCREEN_SHARE_STOPPED, c.chat, C)],
            _check_session("share", "Conference", "screenShareId"),
        ),
        Step(
            "record conference",
            lambda c, conn: _store(
                c,
                "recording",
                recordings.start_recording(conn, actor=c.carol, conference_id=c.ids["conference"]),
            ),
            lambda c: [(K.RECORDING_STARTED, c.chat, C)],
            _check_session("recording", "Conference", "recordingId"),
        ),
        Step(
            "conference recording failed",
            lambda c, conn: recordings.mark_recording_failed(
                conn, recording_id=c.ids["recording"], actor=c.carol, code="encoder.crashed"
            ),
            lambda c: [(K.RECORDING_FAILED, c.chat, C)],
            all_of(
                _check_session("recording", "Conference", "recordingId"),
                has(lambda _c: {"failureCode": "encoder.crashed"}),
            ),
        ),
        Step(
            "bob leaves",
            lambda c, conn: conferences.leave_conference(
                conn, conference_id=c.ids["conference"], actor=c.bob
            ),
            lambda c: [(K.CONFERENCE_PARTICIPANT_LEFT, c.chat, C)],
            all_of(_check_conference, has(lambda c: {"userId": s(c.bob)})),
        ),
        Step(
            "end conference",
            lambda c, conn: conferences.end_conference(
                conn, conference_id=c.ids["conference"], actor=c.alice
            ),
            lambda c: [(K.CONFERENCE_ENDED, c.chat, C)],
            all_of(_check_conference, has(lambda c: {"endedByUserId": s(c.alice)})),
        ),
    ]


async def _store(ctx: Ctx, name: str, result: Awaitable[UUID]) -> None:
    _keep(name, ctx, await result)


async def _reap(ctx: Ctx, conn: Any) -> None:
    # A zero timeout instead of waiting: the one call still ringing is reaped.
    assert await reap_unanswered_calls(conn, ring_timeout=0) == [ctx.ids["call"]]


STEPS = _steps()


def kinds_covered() -> set[RealtimeDispatchKind]:
    ctx = Ctx(pool=None)  # type: ignore[arg-type]
    ctx.ids.update({k: uuid4() for k in ("chat", "call", "conference")})
    return {kind for step in STEPS for kind, _, _ in step.expect(ctx)}


async def new_rows(pool: asyncpg.Pool, after: UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT id, kind, target_kind, chat_id, target_user_id, message_id, ref_id, session_kind,"
        " xmin::text AS xmin FROM messenger.realtime_outbox WHERE id > $1 ORDER BY id",
        after,
    )


async def last_id(pool: asyncpg.Pool) -> UUID:
    value = await pool.fetchval("SELECT id FROM messenger.realtime_outbox ORDER BY id DESC LIMIT 1")
    return value or UUID(int=0)


DOMAIN_TABLES = sorted({*DOMAIN_TABLE.values(), "chats", "message_client_ids"})


async def domain_snapshot(pool: asyncpg.Pool) -> dict[str, str]:
    """Every domain row as text: equal snapshots = nothing was written."""
    return {
        table: await pool.fetchval(
            f"SELECT coalesce(string_agg(t::text, '|' ORDER BY t::text), '')"
            f" FROM messenger.{table} t"
        )
        for table in DOMAIN_TABLES
    }


def row_shape(row: asyncpg.Record) -> tuple[str, str, str | None]:
    group = (
        f"chat:{row['chat_id']}"
        if row["target_kind"] == "ChatGroup"
        else (f"user:{row['target_user_id']}")
    )
    return row["kind"], group, row["session_kind"]


def expected_shape(expected: Expected) -> list[tuple[str, str, str | None]]:
    return [(k.value, g, sk.value if sk else None) for k, g, sk in expected]


class Api:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def call(
        self, method: str, path: str, user: UUID | None, body: Any = None, **kw: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {make_token(user)}"} if user else {}
        return await self.http.request(method, path, json=body, headers=headers, **kw)


async def written(pool: asyncpg.Pool) -> tuple[dict[str, str], int]:
    count = await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox")
    return await domain_snapshot(pool), int(count)
