"""Point 6: hostile input against a real ``realtime-dispatch serve`` process.

REST bodies fuzzed with hypothesis (no 5xx, no partial write: every message has exactly its
outbox row), SQL injection in every string field stored verbatim, hub frames fuzzed and
oversized, tokens forged / expired / ``alg: none`` / for another user, a member of chat A
reaching for chat B, and outbox rows written by hand with garbage that the worker quarantines
with a reason without dying."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import httpx
import jwt
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from realtime_dispatch.messenger import commands
from support.hub_wire import SECRET, make_token
from support.procs import wait_until
from tests.chaos.harness import (
    RS,
    SERVICE_KEY,
    Listener,
    invariants,
    outbox_status,
    report,
    scale,
    serving,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = scale("REALTIME_CHAOS_FUZZ_EXAMPLES", 60)

INJECTIONS = [
    "'; DROP TABLE messenger.messages; --",
    "' OR '1'='1",
    '"); DELETE FROM messenger.realtime_outbox; --',
    "\\'; SELECT pg_sleep(5); --",
    "1; UPDATE messenger.realtime_outbox SET status='Done'",
    "$$; TRUNCATE messenger.chats; $$",
    "%s%s%s%n",
    "{{7*7}}",
]

# NUL is left out of the fuzzed text: PostgreSQL cannot store it and the API answers 500 for it,
# a known bug pinned by ``test_nul_character_in_string_fields_is_a_client_error`` below.
# Lone surrogates are left out too: they cannot be encoded as UTF-8 to be sent at all; their
# escaped form is fuzzed on every body by ``test_openapi_fuzz.py``.
TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
    max_size=40,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | TEXT
    | st.sampled_from(INJECTIONS)
    | st.sampled_from(["Text", "File", "Card"])
    | st.uuids().map(str),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "kind",
    "fileMeta",
    "cardText",
    "clientMessageId",
    "title",
    "memberUserIds",
    "body",
    "userId",
    "seq",
    "calleeUserId",
    "callId",
    "code",
    "conferenceId",
]
# A File message's metadata, each field sometimes valid and sometimes hostile.
file_meta = st.fixed_dictionaries(
    {
        "fileId": TEXT | json_values,
        "name": TEXT,
        "size": st.integers(min_value=-1, max_value=2**63) | json_values,
        "contentType": st.sampled_from(["image/png", "application/pdf", "png", ""]) | TEXT,
    }
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["File", "Card", "Text"])},
        optional={
            "fileMeta": file_meta | json_values,
            "body": TEXT,
            "cardText": TEXT | json_values,
            "clientMessageId": st.sampled_from(["same", "x" * 64, "x" * 65, ""]) | TEXT,
        },
    ),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
    st.binary(max_size=64),
)


async def test_rest_fuzz_and_sql_injection(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="fuzz", members=[bob])
        sent = await commands.send_message(conn, chat_id=chat, sender=alice, body="seed")
        request = await commands.request_contact(conn, requester=bob, addressee=alice)
        call = await commands.start_call(conn, caller=alice, callee=bob)
        conference = await commands.start_conference(conn, chat_id=chat, actor=alice)
    async with serving(database_url, tmp_path) as serve:
        headers = {"Authorization": f"Bearer {make_token(alice, ttl=3600)}"}
        paths = [
            ("POST", "/api/chats"),
            ("PATCH", f"/api/chats/{chat}"),
            ("POST", f"/api/chats/{chat}/participants"),
            ("POST", f"/api/chats/{chat}/messages"),
            ("PATCH", f"/api/chats/{chat}/messages/{sent.message_id}"),
            ("POST", f"/api/chats/{chat}/read"),
            ("POST", "/api/contacts/requests"),
            ("POST", "/api/blacklist"),
            ("POST", "/api/calls"),
            ("POST", f"/api/chats/{chat}/conferences"),
            ("POST", "/api/recordings"),
            ("POST", "/api/screen-shares"),
            ("POST", f"/api/contacts/requests/{request}/decline"),
            ("POST", f"/api/calls/{call}/media"),
            ("POST", f"/api/conferences/{conference}/media"),
        ]
        statuses: dict[int, int] = {}

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(route=st.sampled_from(paths), body=bodies)
        def fuzz(route: tuple[str, str], body: object) -> None:
            method, path = route
            content = body if isinstance(body, bytes) else orjson.dumps(body)
            with httpx.Client(base_url=serve.http_url, headers=headers, timeout=30) as http:
                answer = http.request(
                    method, path, content=content, headers={"Content-Type": "application/json"}
                )
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            assert answer.status_code < 500, (method, path, body, answer.text)

        await asyncio.to_thread(fuzz)
        await invariants(pool)

        # SQL injection in every string field: stored and returned verbatim, nothing else.
        async with httpx.AsyncClient(base_url=serve.http_url, headers=headers) as http:
            for text in INJECTIONS:
                created = await http.post("/api/chats", json={"title": text, "memberUserIds": []})
                assert created.status_code in {201, 400, 422}, created.text
                if created.status_code == 201:
                    got = await http.get(f"/api/chats/{created.json()['chatId']}")
                    assert got.json()["title"] == text
                posted = await http.post(f"/api/chats/{chat}/messages", json={"body": text})
                assert posted.status_code in {201, 400, 422}, posted.text
                code = await http.post(f"/api/recordings/{uuid4()}/failed", json={"code": text})
                assert code.status_code in {400, 404, 422}, code.text
                search = await http.get(f"/api/chats/{chat}/messages", params={"afterSeq": text})
                assert search.status_code == 422
            listed = await http.get(
                f"/api/chats/{chat}/messages", params={"afterSeq": 0, "limit": 200}
            )
            stored = {item["body"] for item in listed.json()["items"]}
            assert set(INJECTIONS) <= stored
        await invariants(pool)
        assert await pool.fetchval("SELECT count(*) FROM messenger.chats") >= 1
        await wait_until(
            lambda: _pending_zero(pool), within=60
        )  # the dispatcher in ``serve`` drained everything the fuzz produced
        status = await outbox_status(pool)
    assert status.get("Quarantined", 0) == 0, status
    report(
        "REST fuzz (hypothesis) + SQL injection",
        examples=EXAMPLES,
        statuses={str(k): v for k, v in sorted(statuses.items())},
        injections=len(INJECTIONS),
        server_errors=0,
        partial_writes=0,
        outbox=status,
    )


async def test_nul_character_in_string_fields_is_a_client_error(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice = uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="nul", members=[])
    async with serving(database_url, tmp_path) as serve:
        headers = {"Authorization": f"Bearer {make_token(alice)}"}
        async with httpx.AsyncClient(base_url=serve.http_url, headers=headers) as http:
            answers = [
                await http.post("/api/chats", json={"title": "a\x00b", "memberUserIds": []}),
                await http.post(f"/api/chats/{chat}/messages", json={"body": "a\x00b"}),
            ]
    assert [a.status_code for a in answers] == [422, 422], [a.text for a in answers]
    assert {a.json()["message"] for a in answers} == {"text fields must not contain NUL characters"}
    assert await pool.fetchval("SELECT count(*) FROM messenger.chats") == 1
    assert await pool.fetchval("SELECT count(*) FROM messenger.messages") == 0


async def _pending_zero(pool: asyncpg.Pool) -> bool:
    return (await outbox_status(pool)).get("Pending", 0) == 0


async def test_hub_frames_fuzzed_oversized_and_malformed(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="frames", members=[bob])
    async with serving(database_url, tmp_path) as serve:
        url = f"{serve.ws_url}?access_token={make_token(bob, ttl=3600)}"
        outcomes: dict[str, int] = {}

        async def hostile(frames: list[str | bytes], handshake: bool) -> None:
            try:
                async with connect(url, ping_interval=None, max_size=None, open_timeout=10) as ws:
                    if handshake:
                        await ws.send('{"protocol":"json","version":1}' + RS)
                    for frame in frames:
                        await ws.send(frame)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.3):
                            async for _ in ws:
                                pass
                outcome = "closed_by_client"
            except ConnectionClosed as closed:
                outcome = f"closed_{closed.rcvd.code if closed.rcvd else 'abnormal'}"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        records = st.one_of(
            st.text(max_size=200),
            json_values.map(lambda v: orjson.dumps(v).decode() + RS),
            st.fixed_dictionaries(
                {"type": st.integers(-3, 12), "target": st.text(max_size=20)},
                optional={
                    "arguments": st.lists(json_values, max_size=3),
                    "invocationId": st.text(max_size=8),
                    "sequenceId": st.integers(-5, 2**40),
                },
            ).map(lambda v: orjson.dumps(v).decode() + RS),
            st.binary(max_size=200),
        )
        loop = asyncio.get_running_loop()

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(frames=st.lists(records, min_size=1, max_size=5), handshake=st.booleans())
        def fuzz(frames: list[str | bytes], handshake: bool) -> None:
            asyncio.run_coroutine_threadsafe(hostile(frames, handshake), loop).result(60)

        await asyncio.to_thread(fuzz)
        # Oversized and malformed, explicitly.
        for frames in (
            ["x" * (4 * 1024 * 1024)],
            ['{"protocol":"json","version":1}' + RS + "{" * 100_000 + RS],
            ['{"protocol":"json","version":1}' + RS + "[" * 50_000 + "]" * 50_000 + RS],
            ['{"protocol":"messagepack","version":1}' + RS],
            [b"\xff\xfe\x00" * 1000],
        ):
            await hostile(list(frames), handshake=False)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{serve.http_url}/healthz")).status_code == 200
        # A well-behaved client still gets its pushes.
        listener = Listener(bob, [serve.ws_url])
        listener.start()
        try:
            await asyncio.wait_for(listener.connected.wait(), 30)
            async with pool.acquire() as conn:
                await commands.send_message(conn, chat_id=chat, sender=alice, body="still fine")
            await wait_until(lambda: listener.received == [(str(chat), 1)], within=30)
        finally:
            await listener.close()
    report(
        "hub protocol fuzz (hypothesis) + oversized/malformed frames",
        examples=EXAMPLES,
        outcomes=dict(sorted(outcomes.items())),
        crashes=0,
    )


def forged_tokens(victim: UUID) -> dict[str, str]:
    now = int(time.time())
    return {
        "wrong secret": jwt.encode(
            {"sub": str(victim), "exp": now + 300}, "x" * 40, algorithm="HS256"
        ),
        "expired": make_token(victim, ttl=-60),
        "alg none": jwt.encode({"sub": str(victim), "exp": now + 300}, None, algorithm="none"),
        "no exp": jwt.encode({"sub": str(victim)}, SECRET, algorithm="HS256"),
        "sub not a uuid": jwt.encode(
            {"sub": "' OR 1=1 --", "exp": now + 300}, SECRET, algorithm="HS256"
        ),
        "garbage": "not.a.jwt",
        "tampered": make_token(victim)[:-4] + "AAAA",
        # H19: claims read strictly (RFC 7519 NumericDate; the user key in canonical form).
        **{
            f"{claim} as a string": jwt.encode(
                {"sub": str(victim), "exp": now + 300, claim: str(value)}, SECRET, "HS256"
            )
            for claim, value in (("exp", now + 300), ("nbf", now - 60), ("iat", now))
        },
        "exp as true": jwt.encode({"sub": str(victim), "exp": True}, SECRET, algorithm="HS256"),
        **{
            f"sub as {form}": make_token(victim, sub=form.format(victim))
            for form in ("{{{}}}", "urn:uuid:{}", "{}\n")
        },
        "sub in upper case": make_token(victim, sub=str(victim).upper()),
        "sub without hyphens": make_token(victim, sub=victim.hex),
    }


async def test_forged_tokens_and_cross_chat_access(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice, mallory = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat_a = await commands.create_chat(conn, creator=mallory, title="A", members=[])
        chat_b = await commands.create_chat(conn, creator=alice, title="B", members=[])
        await commands.send_message(conn, chat_id=chat_b, sender=alice, body="secret of B")
    refused = 0
    async with serving(database_url, tmp_path) as serve:
        async with httpx.AsyncClient(base_url=serve.http_url) as http:
            for name, token in forged_tokens(alice).items():
                auth = {"Authorization": f"Bearer {token}"}
                answer = await http.get(f"/api/chats/{chat_b}/messages", headers=auth)
                assert answer.status_code == 401, (name, answer.status_code)
                posted = await http.post(
                    f"/api/chats/{chat_b}/messages", headers=auth, json={"body": "forged"}
                )
                assert posted.status_code == 401, (name, posted.status_code)
                negotiated = await http.post(
                    "/hubs/messenger/negotiate", params={"negotiateVersion": 1}, headers=auth
                )
                assert negotiated.status_code == 401, name
                with pytest.raises(InvalidStatus) as ws_refused:
                    async with connect(f"{serve.ws_url}?access_token={token}"):
                        pass
                assert ws_refused.value.response.status_code == 401, name
                refused += 4
            # Mallory, a member of A, reaches for B: read, write, edit, mark read, invite.
            auth = {"Authorization": f"Bearer {make_token(mallory)}"}
            attempts = [
                ("GET", f"/api/chats/{chat_b}", None),
                ("GET", f"/api/chats/{chat_b}/messages", None),
                ("POST", f"/api/chats/{chat_b}/messages", {"body": "intruder"}),
                ("POST", f"/api/chats/{chat_b}/read", {"seq": 1}),
                ("POST", f"/api/chats/{chat_b}/participants", {"userId": str(mallory)}),
                ("PATCH", f"/api/chats/{chat_b}", {"title": "pwned"}),
                ("POST", f"/api/chats/{chat_b}/conferences", None),
            ]
            for method, path, body in attempts:
                answer = await http.request(method, path, headers=auth, json=body)
                assert answer.status_code in {403, 404}, (method, path, answer.status_code)
                assert "secret of B" not in answer.text
                refused += 1
        # Subscribe: Mallory's connection gets A's pushes and never B's, whatever it invokes.
        mallory_listener = Listener(mallory, [serve.ws_url])
        mallory_listener.start()
        try:
            await asyncio.wait_for(mallory_listener.connected.wait(), 30)
            async with connect(
                f"{serve.ws_url}?access_token={make_token(mallory)}", ping_interval=None
            ) as ws:
                await ws.send('{"protocol":"json","version":1}' + RS)
                for target in ("JoinGroup", "Subscribe", "AddToGroup", "join"):
                    for argument in (f"chat:{chat_b}", str(chat_b)):
                        invocation = {"type": 1, "target": target, "arguments": [argument]}
                        await ws.send(orjson.dumps(invocation).decode() + RS)
            async with pool.acquire() as conn:
                await commands.send_message(conn, chat_id=chat_b, sender=alice, body="B only")
                await commands.send_message(conn, chat_id=chat_a, sender=mallory, body="A")
            await wait_until(lambda: (str(chat_a), 1) in mallory_listener.received, within=30)
            await wait_until(lambda: _pending_zero(pool), within=30)
            assert all(chat == str(chat_a) for chat, _ in mallory_listener.received)
        finally:
            await mallory_listener.close()
    written = await pool.fetchval(
        "SELECT count(*) FROM messenger.messages WHERE chat_id = $1", chat_b
    )
    assert written == 2  # alice's two; nothing of Mallory's or of the forged tokens
    title = await pool.fetchval("SELECT title FROM messenger.chats WHERE id = $1", chat_b)
    assert title == "B"
    report(
        "forged/expired/alg-none tokens, cross-chat read/write/subscribe",
        attempts_refused=refused,
        leaked=0,
        written_by_intruder=0,
    )


async def test_garbage_outbox_rows_are_quarantined_and_the_worker_survives(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    """A foreign writer on a schema without the check constraints (dropped here on this test's
    private database) inserts rows nobody could have enqueued."""
    async with pool.acquire() as conn:
        # The constraints turn garbage away at the door first.
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id)"
                " VALUES (messenger.realtime_new_id(), 'NoSuchKind', 'ChatGroup',"
                " gen_random_uuid())"
            )
        for constraint in (
            "ck_rto_kind",
            "ck_rto_target_kind",
            "ck_rto_session_kind",
            "ck_rto_target_id",
        ):
            await conn.execute(
                f"ALTER TABLE messenger.realtime_outbox DROP CONSTRAINT {constraint}"
            )
        # ...and the kind registry's trigger (a kind nobody registered).
        await conn.execute("ALTER TABLE messenger.realtime_outbox DISABLE TRIGGER trg_rto_kind")
        garbage = [
            ("NoSuchKind", "ChatGroup", uuid4(), None, None),
            ("MessageReceived", "ChatGroup", None, None, None),  # no chat id
            ("ContactRequestReceived", "User", None, None, None),  # no target user
            ("CallInvited", "User", None, uuid4(), "Hologram"),  # bad session kind
            ("MessageReceived", "Nowhere", uuid4(), None, None),  # bad target kind
            ("'; DROP TABLE messenger.chats--", "ChatGroup", uuid4(), None, None),
            ("MessageReceived", "ChatGroup", uuid4(), None, None),  # message id missing
        ]
        for kind, target, chat_id, user_id, session in garbage:
            await conn.execute(
                "INSERT INTO messenger.realtime_outbox"
                " (id, kind, target_kind, chat_id, target_user_id, session_kind, ref_id)"
                " VALUES (messenger.realtime_new_id(), $1, $2, $3, $4, $5, gen_random_uuid())",
                kind,
                target,
                chat_id,
                user_id,
                session,
            )
        alice, bob = uuid4(), uuid4()
        chat = await commands.create_chat(conn, creator=alice, title="ok", members=[bob])
        await commands.send_message(conn, chat_id=chat, sender=alice, body="good row")
    async with serving(database_url, tmp_path, REALTIME_DISPATCH_MAX_ATTEMPTS="3") as serve:
        await wait_until(lambda: _pending_zero(pool), within=60)
        rows = await pool.fetch(
            "SELECT kind, status, attempts, last_error FROM messenger.realtime_outbox"
        )
        assert serve.alive
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    quarantined = [r for r in rows if r["status"] == "Quarantined"]
    assert len(quarantined) == len(garbage), [dict(r) for r in rows]
    assert all(r["last_error"] for r in quarantined)
    assert all(r["attempts"] == 1 for r in quarantined)  # permanent: at once, not after retries
    assert any(r["kind"] == "MessageReceived" and r["status"] == "Done" for r in rows)
    assert await pool.fetchval("SELECT count(*) FROM messenger.chats") >= 1
    report(
        "garbage outbox rows written by hand",
        rows=len(garbage),
        quarantined=len(quarantined),
        reasons=sorted(
            {
                r["last_error"].split(":")[0] + ":" + r["last_error"].split(":")[1]
                for r in quarantined
            }
        ),
        worker_crashes=0,
        outbox=by_status,
    )


# Limits before work, slow senders, per-user caps (docs/RELIABILITY.md, "Hostile clients") ------

FIFTY_MB = 50 * 1024 * 1024


async def _http_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _status(reader: asyncio.StreamReader) -> int:
    """The status of the response on ``reader``; the server closes the connection after it."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    assert await reader.read() == b"", "the connection stays open"
    return status


def _peak_memory_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def _declared(port: int, path: str, headers: dict[str, str]) -> int:
    """Send only the head of a POST declaring a 50 MB body: the answer comes without the body."""
    reader, writer = await _http_open(port)
    try:
        writer.write(_head("POST", path, {"Content-Length": str(FIFTY_MB), **headers}))
        await writer.drain()
        return await _status(reader)
    finally:
        writer.close()


async def _streamed(
    port: int,
    path: str,
    headers: dict[str, str],
    held: asyncio.Event | None = None,
    paused: asyncio.Event | None = None,
) -> tuple[int, int]:
    """Stream a 50 MB chunked body in 16 KiB chunks until the server answers; with ``held``,
    pause after 8 KiB (setting ``paused``) until it is set. Returns (status, bytes sent)."""
    reader, writer = await _http_open(port)
    chunk = b"[" * 16 * 1024
    sent = 0
    answer = asyncio.ensure_future(_status(reader))
    try:
        writer.write(_head("POST", path, {"Transfer-Encoding": "chunked", **headers}))
        if held is not None:
            writer.write(b"2000\r\n" + b"[" * 0x2000 + b"\r\n")
            sent += 0x2000
            await writer.drain()
            if paused is not None:
                paused.set()
            await held.wait()
        with contextlib.suppress(ConnectionError):
            while sent < FIFTY_MB and not answer.done():
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                await writer.drain()
                await asyncio.sleep(0)  # read while writing, as a client would
        return await answer, sent
    finally:
        answer.cancel()
        writer.close()


async def test_bodies_are_limited_before_they_are_read(database_url: str, tmp_path: Path) -> None:
    """50 MB bodies, without a token and with one: 401 / 413 before the body is read (the
    declared ones) or as soon as it passes the route's limit (the streamed ones), the server's
    peak memory barely moved, and ``/healthz`` answering while bodies are held half-sent."""
    user = uuid4()
    token = {"Authorization": f"Bearer {make_token(user, ttl=3600)}"}
    async with serving(database_url, tmp_path) as serve:
        assert serve.process is not None
        assert serve.port is not None
        port, pid = serve.port, serve.process.pid
        before = _peak_memory_kb(pid)
        routes = ["/api/chats", "/hubs/messenger/negotiate", "/api/v1/hubs/messenger/groups/g"]
        declared = await asyncio.gather(
            *(_declared(port, path, {}) for path in routes * 2),
            *(_declared(port, "/api/chats", {"Authorization": "Bearer forged"}) for _ in range(2)),
            *(_declared(port, "/api/chats", token) for _ in range(4)),
        )
        assert declared == [401] * 8 + [413] * 4
        held = asyncio.Event()
        paused = [asyncio.Event() for _ in range(4)]
        streams = [
            asyncio.ensure_future(_streamed(port, "/api/chats", token, held, paused[i]))
            for i in range(4)
        ]
        streams += [asyncio.ensure_future(_streamed(port, "/api/chats", {}))]
        await asyncio.gather(*(event.wait() for event in paused))
        async with httpx.AsyncClient() as http:  # four bodies half-sent, the server answers
            assert (await http.get(f"{serve.http_url}/healthz")).status_code == 200
        held.set()
        results = await asyncio.gather(*streams)
        assert [status for status, _ in results] == [413] * 4 + [401]
        # Refused once past the 16 KiB limit: nowhere near the 50 MB offered.
        assert max(sent for _, sent in results) < 16 * 1024 * 1024
        growth_mb = (_peak_memory_kb(pid) - before) / 1024
        assert growth_mb < 40, f"peak memory grew {growth_mb:.0f} MB"
        async with httpx.AsyncClient() as http:
            ok = await http.post(
                f"{serve.http_url}/api/chats", json={"title": "after the flood"}, headers=token
            )
            assert ok.status_code == 201
    report(
        "50 MB bodies before auth",
        declared=len(declared),
        streamed=len(results),
        peak_memory_growth_mb=round(growth_mb, 1),
    )


async def _kept_alive(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection that got one ``/healthz`` answer and stays open; None when refused."""
    reader, writer = await _http_open(port)
    writer.write(_head("GET", "/healthz", {}))
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head.startswith(b"HTTP/1.1 200"):
        writer.close()
        return None
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    return reader, writer


async def test_slow_senders_are_cut_and_one_address_is_capped(
    database_url: str, tmp_path: Path
) -> None:
    """Past the per-address cap a connection gets 503 at once; headers that never complete get
    408 and a closed connection; a body that stops coming gets a closed connection."""
    env = {
        "REALTIME_HTTP_HEADER_TIMEOUT": "3",
        "REALTIME_HTTP_BODY_TIMEOUT": "3",
        "REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT": "10",
    }
    token = {"Authorization": f"Bearer {make_token(uuid4(), ttl=3600)}"}
    async with serving(database_url, tmp_path, **env) as serve:
        assert serve.port is not None
        port = serve.port
        held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

        async def fill() -> bool:
            """Hold ten answered keep-alive connections (once the readiness probe's is gone)."""
            while len(held) < 10:
                connection = await _kept_alive(port)
                if connection is None:
                    return False
                held.append(connection)
            return True

        await wait_until(fill, within=10)
        eleventh_reader, eleventh = await _http_open(port)
        assert (await eleventh_reader.read()).startswith(b"HTTP/1.1 503")
        eleventh.close()
        # Half a request on five; a body that stops on one; nothing more on the other four.
        for _, writer in held[:5]:
            writer.write(b"POST /api/chats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz")
        held[5][1].write(
            _head("POST", "/api/chats", {"Content-Length": "100", **token}) + b'{"title":'
        )
        answers = await asyncio.gather(*(reader.read() for reader, _ in held))
        timed_out = [answers[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9)]
        assert all(a.startswith(b"HTTP/1.1 408") for a in timed_out), answers
        assert answers[5] == b""  # closed, unanswered: the app saw a disconnect
        for _, writer in held:
            writer.close()
        async with httpx.AsyncClient() as http:  # the places are free again
            assert (await http.get(f"{serve.http_url}/healthz")).status_code == 200
    report("slow senders", header_timeouts=len(timed_out), body_timeouts=1, refused_at_cap=1)


async def test_one_user_is_capped_at_negotiate_and_at_upgrade(
    database_url: str, tmp_path: Path
) -> None:
    user = uuid4()
    token = make_token(user, ttl=3600)
    env = {"REALTIME_HUB_MAX_CONNECTIONS_PER_USER": "2"}
    async with serving(database_url, tmp_path, **env) as serve, httpx.AsyncClient() as http:
        url = f"{serve.ws_url}?access_token={token}"
        negotiate = f"{serve.http_url}/hubs/messenger/negotiate?negotiateVersion=1"
        auth = {"Authorization": f"Bearer {token}"}
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(2):
                ws = await stack.enter_async_context(connect(url, ping_interval=None))
                await ws.send('{"protocol":"json","version":1}' + RS)
                assert await ws.recv() == "{}" + RS
            refused = await http.post(negotiate, headers=auth)
            assert refused.status_code == 429
            assert "Too many connections" in refused.json()["error"]
            with pytest.raises(InvalidStatus) as upgrade:
                async with connect(url, ping_interval=None):
                    pass
            assert upgrade.value.response.status_code == 429
            other = make_token(uuid4(), ttl=3600)  # another user is not affected
            assert (
                await http.post(negotiate, headers={"Authorization": f"Bearer {other}"})
            ).status_code == 200
            metrics = (await http.get(f"{serve.http_url}/metrics")).text
            assert (
                'messenger_realtime_hub_refused_connections_total{code="TooManyConnections"} 2.0'
                in metrics
            )
        # Both closed: the user may connect again (once the hub has seen them go).
        await wait_until(lambda: _negotiates(http, negotiate, auth), within=10, interval=0.05)
    report("per-user cap", cap=2, refused_negotiate=1, refused_upgrade=1)


async def _negotiates(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> bool:
    return (await http.post(url, headers=headers)).status_code == 200


async def _endless_header(port: int, limit: int) -> tuple[bytes, int]:
    """Stream one header value without end (1 KiB a write) until the server answers or
    ``limit`` bytes went out; returns (the server's status line, bytes sent). Writing stops at
    the status line: past the server's linger a write meets a reset, which would fail the
    reader (and hide the answer) on a loaded machine."""
    reader, writer = await _http_open(port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ")
    sent = 0
    answer = asyncio.ensure_future(reader.readline())
    try:
        with contextlib.suppress(ConnectionError):
            while sent < limit and not answer.done():
                writer.write(b"a" * 1024)
                sent += 1024
                await writer.drain()
                await asyncio.sleep(0)
        async with asyncio.timeout(10):
            return await answer, sent
    finally:
        answer.cancel()
        writer.close()


async def test_request_heads_are_bounded(database_url: str, tmp_path: Path) -> None:
    """H9: ten connections streaming a header without end, a head of 101 fields, a head just
    under the cap: 431 and closed past 16 KiB or 100 fields (nothing more read), the server's
    peak memory barely moved, ``/healthz`` answering meanwhile, the refusals counted."""
    async with serving(database_url, tmp_path) as serve:
        assert serve.process is not None
        assert serve.port is not None
        port, pid = serve.port, serve.process.pid
        before = _peak_memory_kb(pid)
        floods = await asyncio.gather(*(_endless_header(port, 20 << 20) for _ in range(10)))
        assert all(answer.startswith(b"HTTP/1.1 431") for answer, _ in floods), floods[0]
        assert max(sent for _, sent in floods) < 4 << 20  # refused long before 20 MB went out
        reader, writer = await _http_open(port)
        writer.write(_head("GET", "/healthz", {f"X-F{i}": "1" for i in range(100)}))
        assert (await reader.read()).startswith(b"HTTP/1.1 431")
        writer.close()
        async with httpx.AsyncClient() as http:
            near = {"X-Near": "a" * (15 * 1024)}  # the head just under the cap: served
            assert (await http.get(f"{serve.http_url}/healthz", headers=near)).status_code == 200
            metrics = (await http.get(f"{serve.http_url}/metrics")).text
        assert 'messenger_realtime_http_refusals_total{reason="headers_too_large"} 11.0' in metrics
        growth_mb = (_peak_memory_kb(pid) - before) / 1024
        assert growth_mb < 20, f"peak memory grew {growth_mb:.0f} MB"
    report(
        "endless headers",
        connections=10,
        max_sent_kb=max(sent for _, sent in floods) // 1024,
        peak_memory_growth_mb=round(growth_mb, 1),
    )


async def _held_post(port: int, client: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A push whose body never comes, through the "proxy" for ``client``: it holds a place."""
    reader, writer = await _http_open(port)
    headers = {
        "X-Forwarded-For": f"203.0.113.9, {client}",
        "Authorization": f"Bearer {SERVICE_KEY}",
        "Content-Length": "100",
    }
    writer.write(_head("POST", "/api/v1/hubs/messenger/groups/user:x", headers))
    await writer.drain()
    return reader, writer


async def test_behind_a_trusted_proxy_the_forwarded_address_is_capped(
    database_url: str, tmp_path: Path
) -> None:
    """H13: 127.0.0.1 is a trusted proxy; two requests held for client 198.51.100.7, a third
    for it refused 503, one for another client served; refusals counted by reason and logged
    once per address per interval with their count."""
    env = {
        "REALTIME_HTTP_TRUSTED_PROXIES": "127.0.0.0/8, ::1",
        "REALTIME_HTTP_MAX_CONNECTIONS_PER_CLIENT": "2",
    }
    async with serving(database_url, tmp_path, **env) as serve, httpx.AsyncClient() as http:
        assert serve.port is not None
        port = serve.port
        held = [await _held_post(port, "198.51.100.7") for _ in range(2)]
        await asyncio.sleep(0.2)
        statuses = []
        for _ in range(20):
            reader, writer = await _held_post(port, "198.51.100.7")
            statuses.append(await _status(reader))
            writer.close()
        assert statuses == [503] * 20
        other = {"X-Forwarded-For": "198.51.100.8"}
        for _ in range(5):  # far more than 2 connections from 127.0.0.1: not capped
            assert (await http.get(f"{serve.http_url}/healthz", headers=other)).status_code == 200
        forwarded = {"Forwarded": 'for="[2001:db8::7]:4711";proto=http'}
        assert (await http.get(f"{serve.http_url}/healthz", headers=forwarded)).status_code == 200
        metrics = (await http.get(f"{serve.http_url}/metrics")).text
        assert 'messenger_realtime_http_refusals_total{reason="client_cap"} 20.0' in metrics
        for _, writer in held:
            writer.close()
        lines = [
            orjson.loads(line)
            for line in serve.log_text().splitlines()
            if '"http_client_connection_cap"' in line
        ]
    assert len(lines) == 1, lines  # the other 19 wait for the interval's end, as one line
    assert (lines[0]["client"], lines[0]["count"]) == ("198.51.100.7", 1)
    report("behind a proxy", refused=20, log_lines=1)


async def test_streams_before_their_handshake_hold_their_place(
    database_url: str, tmp_path: Path
) -> None:
    """H11: one user, cap 3: three SSE streams and long polls opened without a handshake hold
    the three places (the gauge shows them as ``handshake``); a fourth stream, poll or
    negotiate is refused 429; once they are gone the places are free."""
    token = make_token(uuid4(), ttl=3600)
    auth = {"Authorization": f"Bearer {token}"}
    env = {"REALTIME_HUB_MAX_CONNECTIONS_PER_USER": "3"}
    async with (
        serving(database_url, tmp_path, **env) as serve,
        httpx.AsyncClient(timeout=10) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        negotiate = f"{serve.http_url}/hubs/messenger/negotiate?negotiateVersion=1"
        ids = [(await http.post(negotiate, headers=auth)).json()["connectionToken"] for _ in "123"]
        hub = f"{serve.http_url}/hubs/messenger"
        for id_ in ids[:2]:
            stream = await stack.enter_async_context(
                http.stream(
                    "GET", f"{hub}?id={id_}", headers={**auth, "Accept": "text/event-stream"}
                )
            )
            assert stream.status_code == 200
        assert (await http.get(f"{hub}?id={ids[2]}", headers=auth)).status_code == 200  # a poll
        metrics = (await http.get(f"{serve.http_url}/metrics")).text
        assert 'messenger_realtime_hub_connections{state="handshake"} 3.0' in metrics
        assert 'messenger_realtime_hub_connections{state="open"} 0.0' in metrics
        fourth = await http.get(
            f"{hub}?id={uuid4()}", headers={**auth, "Accept": "text/event-stream"}
        )
        assert fourth.status_code == 429
        assert (await http.get(f"{hub}?id={uuid4()}", headers=auth)).status_code == 429
        assert (await http.post(negotiate, headers=auth)).status_code == 429
        await http.delete(f"{hub}?id={ids[2]}", headers=auth)  # the poll's connection ends
        await stack.aclose()  # and the streams go away

        async def freed() -> bool:
            text = (await http.get(f"{serve.http_url}/metrics")).text
            return 'messenger_realtime_hub_connections{state="handshake"} 0.0' in text

        await wait_until(freed, within=10, interval=0.05)
        assert (await http.post(negotiate, headers=auth)).status_code == 200
    report("pre-handshake streams", cap=3, held=3, refused=3)


async def test_one_user_is_held_to_the_send_rate(database_url: str, tmp_path: Path) -> None:
    """H18 against ``serve``: a burst of 3 at one per 10 s; the fourth send and an edit get 429
    with Retry-After, the repeat of an accepted send 200; another user is not held; the
    refusals show in ``/metrics``."""
    env = {"REALTIME_API_SEND_RATE": "0.1", "REALTIME_API_SEND_BURST": "3"}
    alice, bob = uuid4(), uuid4()
    async with (
        serving(database_url, tmp_path, **env) as serve,
        httpx.AsyncClient(base_url=serve.http_url) as http,
    ):
        auth = {"Authorization": f"Bearer {make_token(alice, ttl=3600)}"}
        created = await http.post(
            "/api/chats", json={"title": "rate", "memberUserIds": [str(bob)]}, headers=auth
        )
        path = f"/api/chats/{created.json()['chatId']}/messages"
        first = await http.post(path, json={"body": "0", "clientMessageId": "c"}, headers=auth)
        statuses = [first.status_code]
        for n in range(1, 4):
            posted = await http.post(path, json={"body": str(n)}, headers=auth)
            statuses.append(posted.status_code)
        assert statuses[:3] == [201, 201, 201]
        assert statuses[3] == 429
        refused = await http.post(path, json={"body": "x"}, headers=auth)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        edit = await http.patch(
            f"{path}/{first.json()['messageId']}", json={"body": "e"}, headers=auth
        )
        assert edit.status_code == 429
        repeat = await http.post(path, json={"body": "0", "clientMessageId": "c"}, headers=auth)
        assert (repeat.status_code, repeat.json()) == (200, first.json())
        other = {"Authorization": f"Bearer {make_token(bob, ttl=3600)}"}
        assert (await http.post(path, json={"body": "b"}, headers=other)).status_code == 201
        metrics = (await http.get("/metrics")).text
        assert 'messenger_realtime_api_throttled_total{action="edit"} 1.0' in metrics
    report("send rate", rate=0.1, burst=3, refused=statuses.count(429) + 2, repeat_answered=1)
