"""``GET /api/sync`` on an adopter's schema (``examples/own-schema``: its tables, its manifest
with ``member_spans``, the outbox's schema alone), through the ASGI app as ``hub`` mounts it:
the caller's chat rows written while a member and every row targeted at the caller, built by
the dispatcher's builders over the manifest; the rule the reference messenger's own page query
applies, said as spans; one indexed scan, bounded, as on the reference schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import orjson
import pytest
from fastapi import FastAPI

from realtime_dispatch.auth.tokens import TokenVerifier
from realtime_dispatch.cli.serve import require_sync_composes
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.check import check_manifest
from realtime_dispatch.manifest.manifest import Manifest, load_manifest, shipped_manifest
from realtime_dispatch.messenger import chats, contacts, messages
from realtime_dispatch.messenger.api import create_api
from realtime_dispatch.messenger.schema import migrate
from realtime_dispatch.outbox.queries import parse_queries
from realtime_dispatch.sync.cursor import parse_cursor
from realtime_dispatch.sync.routes import sync_routes
from realtime_dispatch.sync.service import SyncOptions, SyncService
from realtime_dispatch.sync.store import spans_page
from support.databases import scratch_database
from support.hub_wire import SECRET
from support.procs import wait_until
from tests.hub_fixtures import hub_settings
from tests.integration.messenger_world import MEDIA
from tests.integration.sync_client import Sync

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-schema"
WRITES = dict(parse_queries((EXAMPLE / "writes.sql").read_text()))
MANIFEST = load_manifest(EXAMPLE / "projections.sql")
SPANS = MANIFEST.sql("member_spans")
assert SPANS is not None


@pytest.fixture
async def own_url(pg_server_url: str) -> AsyncIterator[str]:
    """A database with the example's tables and the outbox's schema, nothing else of ours."""
    async with scratch_database(pg_server_url, "rd_own_sync") as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute((EXAMPLE / "schema.sql").read_text())
            await migrate(conn, with_messenger=False)
        finally:
            await conn.close()
        yield url


@pytest.fixture
async def own_pool(own_url: str) -> AsyncIterator[asyncpg.Pool]:
    async with asyncpg.create_pool(own_url, min_size=1, max_size=6) as pool:
        yield pool


def _service(pool: asyncpg.Pool, options: SyncOptions | None = None) -> SyncService:
    assert SPANS is not None
    builder = default_payload_builder(MEDIA, manifest=MANIFEST)
    return SyncService(pool, builder, options, page_query=spans_page(SPANS))


@pytest.fixture
async def own_sync(own_pool: asyncpg.Pool) -> AsyncIterator[Sync]:
    app = FastAPI(routes=sync_routes(_service(own_pool), TokenVerifier(SECRET)))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hub"
    ) as http:
        yield Sync(http)


async def _conversation(pool: asyncpg.Pool, *members: UUID) -> UUID:
    chat = uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(WRITES["create_conversation"], chat, "adopters")
        for user in members:
            await conn.execute(WRITES["add_member"], uuid4(), chat, user)
    return chat


async def _post(pool: asyncpg.Pool, chat: UUID, author: UUID, text: str) -> UUID:
    post = uuid4()
    async with pool.acquire() as conn, conn.transaction():
        number = await conn.fetchval(WRITES["next_number"], chat)
        await conn.execute(WRITES["insert_post"], post, chat, number, author, text)
        await conn.execute(WRITES["outbox_message_received"], chat, post, number)
    return post


async def _call(pool: asyncpg.Pool, caller: UUID, callee: UUID) -> UUID:
    call = uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(WRITES["start_call"], call, caller, callee, f"call-{call}")
        await conn.execute(WRITES["outbox_call_invited"], callee, call)
    return call


def _bodies(events: list[Any]) -> list[str]:
    return [e["payload"]["body"] for e in events if e["target"] == "message_received"]


async def test_check_names_member_spans_and_the_example_holds(own_pool: asyncpg.Pool) -> None:
    async with own_pool.acquire() as conn:
        results = {r.name: r.detail for r in await check_manifest(conn, MANIFEST)}
        assert results["member_spans"] == "ok"
        without = Manifest(
            {n: q for n, q in MANIFEST.queries.items() if n != "member_spans"}, MANIFEST.source
        )
        unset = [r.line() for r in await check_manifest(conn, without) if r.detail != "ok"]
    assert "member_spans: not set: /api/sync is off" in unset


async def test_pages_of_the_callers_chats_and_user_rows_built_as_pushed(
    own_pool: asyncpg.Pool, own_sync: Sync
) -> None:
    alice, bob, eve = uuid4(), uuid4(), uuid4()
    start = {user: await own_sync.cursor(user) for user in (alice, bob, eve)}
    chat = await _conversation(own_pool, alice, bob)
    other = await _conversation(own_pool, eve)
    post = await _post(own_pool, chat, alice, "while the hub was down")
    await _post(own_pool, other, eve, "not for bob")
    call = await _call(own_pool, alice, bob)

    events, after = await own_sync.drain(bob, start[bob], limit=1)
    assert [e["target"] for e in events] == ["message_received", "call_invited"]
    ids = await own_pool.fetch(
        "SELECT id::text FROM messenger.realtime_outbox"
        " WHERE chat_id = $1 OR target_user_id = $2"
        " ORDER BY xid, id",
        chat,
        bob,
    )
    assert [e["eventId"] for e in events] == [r["id"] for r in ids]
    received, invited = (e["payload"] for e in events)
    assert received["eventId"] == events[0]["eventId"]
    assert (received["chatId"], received["messageId"], received["seq"]) == (str(chat), str(post), 1)
    assert (received["senderUserId"], received["body"]) == (str(alice), "while the hub was down")
    # A user-targeted row: built now, with media credentials minted for this page.
    assert (invited["callId"], invited["calleeUserId"]) == (str(call), str(bob))
    assert invited["media"]["roomName"] == f"call-{call}"
    assert (await own_sync.get(bob, since=after)).json()["events"] == []

    # alice: her chat, not bob's call; eve: her own chat alone.
    events, _ = await own_sync.drain(alice, start[alice])
    assert [e["target"] for e in events] == ["message_received"]
    events, _ = await own_sync.drain(eve, start[eve])
    assert _bodies(events) == ["not for bob"]


async def test_a_chat_row_is_the_callers_only_when_written_within_a_membership(
    own_pool: asyncpg.Pool, own_sync: Sync
) -> None:
    alice, dana = uuid4(), uuid4()
    since = await own_sync.cursor(dana)
    chat = await _conversation(own_pool, alice)
    await _post(own_pool, chat, alice, "before dana")
    async with own_pool.acquire() as conn:
        await conn.execute(WRITES["add_member"], uuid4(), chat, dana)
    await _post(own_pool, chat, alice, "while dana")
    await own_pool.execute(
        'UPDATE "ConversationMembers" SET "LeftUtc" = now()'
        ' WHERE "ConversationId" = $1 AND "AccountId" = $2',
        chat,
        dana,
    )
    await _post(own_pool, chat, alice, "after dana")
    # Resumed after she left: what was written while she was in, nothing before or after.
    events, since = await own_sync.drain(dana, since)
    assert _bodies(events) == ["while dana"]
    await _post(own_pool, chat, alice, "still after dana")
    events, _ = await own_sync.drain(dana, since)
    assert events == []


async def test_the_reference_member_spans_says_the_reference_pages_rule(
    pool: asyncpg.Pool,
) -> None:
    """On the reference schema, the spans page over the shipped ``member_spans`` answers
    exactly what the reference ``page`` query does: joins, a removal, a user-targeted row."""
    reference = SyncService(pool, default_payload_builder(MEDIA))
    spans = shipped_manifest().sql("member_spans")
    assert spans is not None
    as_spans = SyncService(pool, default_payload_builder(MEDIA), page_query=spans_page(spans))
    routes = sync_routes(reference, TokenVerifier(SECRET))
    app = create_api(pool=pool, options=hub_settings().api_options(), routes=routes)
    spans_app = FastAPI(routes=sync_routes(as_spans, TokenVerifier(SECRET)))
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=spans_app), base_url="http://b") as b,
    ):
        one, two = Sync(a), Sync(b)
        start = {user: await one.cursor(user) for user in (alice, bob, carol)}
        async with pool.acquire() as conn:
            chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
            await messages.send_message(conn, chat_id=chat, sender=alice, body="before carol")
            await chats.add_participant(conn, chat_id=chat, actor=alice, user_id=carol)
            await messages.send_message(conn, chat_id=chat, sender=bob, body="with carol")
            await contacts.request_contact(conn, requester=alice, addressee=bob)
            await chats.remove_participant(conn, chat_id=chat, actor=alice, user_id=carol)
            await messages.send_message(conn, chat_id=chat, sender=alice, body="after carol")
        for user in (alice, bob, carol):
            by_page, _ = await one.drain(user, start[user], limit=2)
            by_spans, _ = await two.drain(user, start[user], limit=2)
            assert [e["eventId"] for e in by_spans] == [e["eventId"] for e in by_page]
        assert by_page == []  # carol: removed, so nothing of the chat (the reference rule)


async def _seed_adopter_log(pool: asyncpg.Pool, user: UUID, rows: int) -> None:
    """600 conversations, ``user`` a member of 300 (joined before any row), ``rows`` rows."""
    await pool.execute(
        """
        INSERT INTO "Conversations" ("Id", "Topic")
        SELECT gen_random_uuid(), 'c' FROM generate_series(1, 600);
        INSERT INTO "ConversationMembers" ("Id", "ConversationId", "AccountId", "JoinedUtc")
        SELECT gen_random_uuid(), "Id", $1, now() - interval '1 day' FROM "Conversations" LIMIT 300;
        INSERT INTO "ConversationMembers" ("Id", "ConversationId", "AccountId")
        SELECT gen_random_uuid(), "Id", gen_random_uuid() FROM "Conversations";
        """.replace("$1", f"'{user}'::uuid")
    )
    await pool.execute(
        f"""
        INSERT INTO messenger.realtime_outbox
            (kind, target_kind, chat_id, message_id, seq, status)
        SELECT 'MessageReceived', 'ChatGroup', c."Id", gen_random_uuid(), g, 'Done'
        FROM generate_series(1, {rows}) g
        JOIN (SELECT "Id", row_number() OVER () - 1 AS n FROM "Conversations") c
          ON c.n = g % 600;
        ANALYZE messenger.realtime_outbox; ANALYZE "ConversationMembers";
        """
    )


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_a_page_is_one_indexed_scan_bounded_by_the_scan_limit(
    own_pool: asyncpg.Pool,
) -> None:
    """As on the reference schema: the page walks ix_rto_sync from the cursor, at most the scan
    bound, and checks each row's chat with one probe of the adopter's membership index, never
    a table scan, whatever the number of conversations."""
    user = uuid4()
    await _seed_adopter_log(own_pool, user, 20_000)
    query = spans_page(SPANS)
    async with own_pool.acquire() as conn:
        text = "\n".join(
            r[0] for r in await conn.fetch(f"EXPLAIN {query}", user, 1, UUID(int=0), 101, 10_000)
        )
        assert "ix_rto_sync" in text, text
        assert "IX_ConversationMembers_ConversationId_AccountId" in text, text
        assert "Seq Scan on realtime_outbox" not in text, text
        assert 'Seq Scan on "ConversationMembers"' not in text, text
        # A caller in no conversation: every row examined is refused, the walk stops at 1,000.
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", uuid4(), 1, UUID(int=0), 101, 1000
        )
    outbox = [
        n
        for n in _plan_nodes(orjson.loads(plan)[0]["Plan"])
        if n.get("Relation Name") == "realtime_outbox"
    ]
    assert outbox, plan
    assert all(n["Actual Rows"] * n["Actual Loops"] <= 1000 for n in outbox), plan


async def test_the_bounds_of_the_reference_sync_hold_on_an_adopter_schema(
    own_pool: asyncpg.Pool,
) -> None:
    """H15 on the adopter's page: the scan bound pages through other rows with ``more``; with
    two of a user's pages held up (the retention floor's table locked), a third is 429 at once,
    and the two end at their statement timeout with 503."""
    options = SyncOptions(scan_limit=1000, statement_timeout=2.0, max_per_user=2, max_concurrent=2)
    app = FastAPI(routes=sync_routes(_service(own_pool, options), TokenVerifier(SECRET)))
    bob = uuid4()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hub"
    ) as http:
        sync = Sync(http)
        since = await sync.cursor(bob)
        await _seed_adopter_log(own_pool, uuid4(), 5_000)
        mine = await _conversation(own_pool, bob)
        await _post(own_pool, mine, bob, "at last")
        pages: list[dict[str, Any]] = []
        cursor = since
        while not pages or pages[-1]["more"] or pages[-1]["heldBack"]:
            page = (await sync.get(bob, since=cursor, limit=100)).json()
            pages.append(page)
            cursor = page["nextCursor"]
            if page["heldBack"]:
                await asyncio.sleep(0.05)
        assert 5 <= len([p for p in pages if p["more"]]) <= 6  # ~5,000 rows / 1,000 a page
        assert [e["payload"]["body"] for p in pages for e in p["events"]] == ["at last"]

        locker = await own_pool.acquire()
        try:
            async with locker.transaction():
                await locker.execute("LOCK messenger.realtime_sync_floor IN ACCESS EXCLUSIVE MODE")
                held = [asyncio.create_task(sync.get(bob, since=since)) for _ in range(2)]

                async def both_waiting() -> bool:
                    waiting = await own_pool.fetchval(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    return bool(waiting == 2)

                await wait_until(both_waiting, within=1.5)  # inside their 2 s timeout
                third = await sync.get(bob, since=since)
                answers = await asyncio.gather(*held)
        finally:
            await own_pool.release(locker)
    assert (third.status_code, third.headers["retry-after"]) == (429, "1")
    assert [a.status_code for a in answers] == [503, 503]
    assert parse_cursor(since).source == parse_cursor(cursor).source


async def test_a_member_spans_that_cannot_be_a_subquery_stops_the_hub_in_one_line(
    own_pool: asyncpg.Pool, own_url: str
) -> None:
    """It prepares alone and holds its contract, but a data change cannot stand inside the
    page's statement: the start stops naming the query, instead of every page failing."""
    writing = (
        'WITH seen AS (UPDATE "ConversationMembers" SET "LastSeenUtc" = "LastSeenUtc"'
        ' WHERE "AccountId" = $1 RETURNING "ConversationId", "JoinedUtc", "LeftUtc")'
        ' SELECT "ConversationId" AS chat_id, "JoinedUtc" AS joined_at,'
        ' "LeftUtc" AS left_at FROM seen'
    )
    manifest = Manifest({**MANIFEST.queries, "member_spans": writing}, "/srv/projections.sql")
    url = own_url
    async with own_pool.acquire() as conn:
        results = {r.name: r.detail for r in await check_manifest(conn, manifest)}
    assert results["member_spans"] == "ok"
    with pytest.raises(ConfigurationError) as caught:
        await require_sync_composes(url, manifest)
    assert str(caught.value).startswith(
        "REALTIME_PROJECTIONS: member_spans: does not compose into the sync page: "
    ), caught.value
    assert str(caught.value).endswith("(/srv/projections.sql)")
    await require_sync_composes(url, MANIFEST)  # the example's composes
