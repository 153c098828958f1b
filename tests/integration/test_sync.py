"""``GET /api/sync`` on a real PostgreSQL, through the ASGI app: the caller's events after a
cursor, paged, built by the dispatcher's builders; membership windows; limited past retention
and across databases; refusals; no gap however commits interleave; one indexed scan."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import orjson
import pytest

from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.messenger import chats, contacts, messages
from realtime_dispatch.sync.cursor import SyncCursor, parse_cursor
from realtime_dispatch.sync.service import TAIL_SCAN, SyncOptions, SyncService, SyncTimeout
from realtime_dispatch.sync.store import QUERIES
from support.procs import wait_until
from tests.integration.messenger_world import MEDIA
from tests.integration.sync_client import Sync, sync_api


@pytest.fixture
async def sync(pool: asyncpg.Pool) -> AsyncIterator[Sync]:
    async with sync_api(pool) as (api, _):
        yield api


async def others_rows(pool: asyncpg.Pool, rows: int) -> None:
    """``rows`` Done outbox rows of 50 new chats nobody of the test is in, then ANALYZE."""
    await pool.execute(
        """
        INSERT INTO messenger.chats (id, title, created_by)
        SELECT gen_random_uuid(), 'other', gen_random_uuid() FROM generate_series(1, 50)
        """
    )
    await pool.execute(
        """
        INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq, status)
        SELECT 'MessageReceived', 'ChatGroup', c.id, gen_random_uuid(), g, 'Done'
        FROM generate_series(1, $1::int) g
        JOIN (SELECT id, row_number() OVER () - 1 AS n FROM messenger.chats
              WHERE title = 'other') c ON c.n = g % 50
        """,
        rows,
    )
    await pool.execute("ANALYZE messenger.realtime_outbox")


async def outbox_ids(pool: asyncpg.Pool, where: str, *args: object) -> list[str]:
    rows = await pool.fetch(f"SELECT id FROM messenger.realtime_outbox WHERE {where}", *args)
    return sorted(str(r["id"]) for r in rows)


async def test_pages_of_the_callers_groups_built_as_pushed(pool: asyncpg.Pool, sync: Sync) -> None:
    alice, bob, carol, eve = (uuid4() for _ in range(4))
    start = {user: await sync.cursor(user) for user in (alice, bob, carol, eve)}
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        other = await chats.create_chat(conn, creator=eve, title="private", members=[alice])
        first = await messages.send_message(conn, chat_id=chat, sender=alice, body="before carol")
        await messages.send_message(conn, chat_id=other, sender=eve, body="not for bob")
        await chats.add_participant(conn, chat_id=chat, actor=alice, user_id=carol)
        for n in range(5):
            await messages.send_message(conn, chat_id=chat, sender=bob, body=f"m{n}")
        await contacts.request_contact(conn, requester=alice, addressee=bob)
        await chats.remove_participant(conn, chat_id=chat, actor=alice, user_id=carol)
        await messages.send_message(conn, chat_id=chat, sender=alice, body="after carol")
        # A row whose message is gone cannot be built: skipped (its page is short, with more).
        await conn.execute("DELETE FROM messenger.messages WHERE body = 'm1'")

    # bob: his chat's events and his own, oldest first, in pages of 3, each exactly the push.
    events, after = await sync.drain(bob, start[bob], limit=3)
    mine = await outbox_ids(
        pool, "chat_id = $1 OR target_user_id = $2 AND target_kind = 'User'", chat, bob
    )
    gone = await pool.fetchval(
        "SELECT o.id::text FROM messenger.realtime_outbox o WHERE kind = 'MessageReceived'"
        " AND NOT EXISTS (SELECT 1 FROM messenger.messages m WHERE m.id = o.message_id)"
    )
    assert sorted(e["eventId"] for e in events) == sorted(set(mine) - {gone})
    assert len({e["eventId"] for e in events}) == len(events)
    bodies = [e["payload"].get("body") for e in events if e["target"] == "message_received"]
    assert bodies == ["before carol", "m0", "m2", "m3", "m4", "after carol"]
    assert all(e["payload"]["eventId"] == e["eventId"] for e in events)
    received = next(e for e in events if e["target"] == "message_received")
    assert received["payload"]["messageId"] == str(first.message_id)
    assert {e["target"] for e in events} == {
        "message_received",
        "chat_updated",
        "contact_request_received",
    }
    assert "not for bob" not in str(events)
    again = await sync.get(bob, since=after)
    assert again.json()["events"] == []  # nothing new: the same place (or the horizon)

    # carol: only what was committed while she was a member, and nothing now she is out.
    events, _ = await sync.drain(carol, start[carol])
    assert events == []
    # eve never sees the chat she is not in; alice sees both chats.
    events, _ = await sync.drain(eve, start[eve])
    assert {e["payload"]["chatId"] for e in events} == {str(other)}
    events, _ = await sync.drain(alice, start[alice])
    assert {e["payload"].get("chatId") for e in events} == {str(chat), str(other)}


async def test_membership_window_from_join_to_removal(pool: asyncpg.Pool, sync: Sync) -> None:
    alice, dana = uuid4(), uuid4()
    since = await sync.cursor(dana)
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t")
        await messages.send_message(conn, chat_id=chat, sender=alice, body="before dana")
        await chats.add_participant(conn, chat_id=chat, actor=alice, user_id=dana)
        await messages.send_message(conn, chat_id=chat, sender=alice, body="while dana")
    events, since = await sync.drain(dana, since)
    assert [e["target"] for e in events] == ["chat_updated", "message_received"]
    assert events[0]["payload"]["eventKind"] == "MemberAdded"
    assert events[1]["payload"]["body"] == "while dana"
    async with pool.acquire() as conn:
        await chats.remove_participant(conn, chat_id=chat, actor=alice, user_id=dana)
        await messages.send_message(conn, chat_id=chat, sender=alice, body="after dana")
    events, _ = await sync.drain(dana, since)
    assert events == []


async def test_limited_past_retention_or_from_another_database(
    pool: asyncpg.Pool, sync: Sync
) -> None:
    alice, bob = uuid4(), uuid4()
    old = await sync.cursor(bob)
    async with pool.acquire() as conn:
        await contacts.request_contact(conn, requester=alice, addressee=bob)
    await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
    await pool.execute("DELETE FROM messenger.realtime_outbox")  # what retention does, early
    r = await sync.get(bob, since=old)
    assert r.status_code == 200
    page = r.json()
    assert page["limited"] is True
    assert page["events"] == []
    fresh = page["nextCursor"]
    async with pool.acquire() as conn:
        await contacts.request_contact(conn, requester=uuid4(), addressee=bob)
    events, _ = await sync.drain(bob, fresh)  # after the full resync, on from the new cursor
    assert [e["target"] for e in events] == ["contact_request_received"]

    stranger = SyncCursor(parse_cursor(fresh).xid, parse_cursor(fresh).after_id, "0" * 16)
    page = (await sync.get(bob, since=stranger.encode())).json()
    assert page["limited"] is True
    assert page["events"] == []


async def test_a_cursor_handed_back_after_limited_is_not_limited_again(
    pool: asyncpg.Pool, sync: Sync
) -> None:
    """The horizon is the cluster's: a transaction open elsewhere (here, begun before the rows
    that retention then deletes) holds it below the retention floor. The cursor handed back
    with ``limited`` (and a fresh one) is past the floor, so the next page is not limited
    again: no resync loop on a busy cluster after an aggressive retention."""
    bob = uuid4()
    old = await sync.cursor(bob)
    held = await pool.acquire()
    try:
        tx = held.transaction()
        await tx.start()
        await held.fetchval("SELECT pg_current_xact_id()")  # an xid: the horizon stays at it
        async with pool.acquire() as conn:
            await contacts.request_contact(conn, requester=uuid4(), addressee=bob)
        await pool.execute("UPDATE messenger.realtime_outbox SET status = 'Done'")
        await pool.execute("DELETE FROM messenger.realtime_outbox")  # the floor passes the horizon
        page = (await sync.get(bob, since=old)).json()
        assert page["limited"] is True
        fresh = await sync.cursor(bob)  # a client that starts now
        for since in (page["nextCursor"], fresh):
            again = (await sync.get(bob, since=since)).json()
            assert again["limited"] is False, again
        async with pool.acquire() as conn:
            await contacts.request_contact(conn, requester=uuid4(), addressee=bob)
        await tx.rollback()
    finally:
        await pool.release(held)
    events, _ = await sync.drain(bob, page["nextCursor"])
    assert [e["target"] for e in events] == ["contact_request_received"]


async def test_refusals(sync: Sync) -> None:
    paths = (await sync.http.get("/openapi.json")).json()["paths"]
    assert {"since", "limit"} <= {p["name"] for p in paths["/api/sync"]["get"]["parameters"]}
    user = uuid4()
    assert (await sync.get(None)).status_code == 401
    for bad in ("", "nope", "0123456789abcdef.12", "0123456789abcdef.1." + "g" * 32):
        r = await sync.get(user, since=bad)
        assert r.status_code == 400, bad
        assert r.json()["error"] == "BadCursor"
        assert "cursor" in r.json()["message"]
    for limit in (0, 1001):
        r = await sync.get(user, limit=limit)
        assert r.status_code == 400
        assert "limit" in r.json()["message"]


async def test_nothing_committed_after_the_cursor_is_missed_however_commits_interleave(
    pool: asyncpg.Pool, sync: Sync
) -> None:
    """Ids are taken before commit. The row of a transaction that took its id first but commits
    last sorts before rows already read: a cursor over ids would skip it."""
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="t", members=[bob])
        side = await chats.create_chat(conn, creator=alice, title="u", members=[bob])
    since = await sync.cursor(bob)
    slow = await pool.acquire()
    try:
        tx = slow.transaction()
        await tx.start()
        early = await messages.send_message(slow, chat_id=chat, sender=alice, body="slow")
        async with pool.acquire() as conn:
            await messages.send_message(conn, chat_id=side, sender=alice, body="fast")
        page = (await sync.get(bob, since=since)).json()
        # Held back behind the open transaction: not "fast" alone with a cursor past "slow".
        assert page["events"] == []
        assert page["heldBack"] is True
        since = page["nextCursor"]
        await tx.commit()
    finally:
        await pool.release(slow)
    events, _ = await sync.drain(bob, since)
    assert [e["payload"]["body"] for e in events] == ["slow", "fast"]
    assert events[0]["payload"]["messageId"] == str(early.message_id)

    # Concurrent owners holding their transactions open for random times, a reader paging all
    # along with small pages: at the end the reader has every row exactly as written.
    stop = asyncio.Event()
    got: dict[str, Any] = {}
    cursor = await sync.cursor(bob)
    rooms = []
    async with pool.acquire() as conn:
        for n in range(4):
            rooms.append(await chats.create_chat(conn, creator=alice, title=f"r{n}", members=[bob]))

    async def owner(room: UUID, n: int) -> None:
        rng = random.Random(n)
        async with pool.acquire() as conn:
            for i in range(15):
                async with conn.transaction():
                    await messages.send_message(conn, chat_id=room, sender=alice, body=f"{n}.{i}")
                    await asyncio.sleep(rng.random() * 0.01)

    async def reader() -> None:
        nonlocal cursor
        while not stop.is_set():
            r = await sync.get(bob, since=cursor, limit=7)
            page = r.json()
            assert page["limited"] is False
            for e in page["events"]:
                got[e["eventId"]] = e
            cursor = page["nextCursor"]
            await asyncio.sleep(0)

    reading = asyncio.create_task(reader())
    await asyncio.gather(*(owner(room, n) for n, room in enumerate(rooms * 2)))
    written = set(await outbox_ids(pool, "chat_id = ANY($1::uuid[])", rooms))
    assert len(written) == 4 + 8 * 15  # each room's creation (chat_updated), then the messages

    async def read_all() -> bool:
        return written <= got.keys()

    await wait_until(read_all, within=60)  # the horizon passes once every owner has committed
    stop.set()
    await reading
    assert set(got) == written
    created = [e["payload"] for e in got.values() if e["target"] == "chat_updated"]
    assert sorted((p["chatId"], p["eventKind"]) for p in created) == sorted(
        (str(room), "ChatCreated") for room in rooms
    )
    bodies = sorted(e["payload"]["body"] for e in got.values() if e["target"] != "chat_updated")
    assert bodies == sorted(f"{n}.{i}" for n in range(8) for i in range(15))


async def test_a_page_is_one_indexed_scan_whatever_the_number_of_chats(pool: asyncpg.Pool) -> None:
    """Seeded: 300 chats of one caller, 20,000 rows; the page walks ix_rto_sync from the cursor
    and checks each row's chat with a probe of the participant key, never a table scan per row
    (the caller's chats are read once per statement: from a table of only the caller's 300
    rows, by a scan of it, once)."""
    user = uuid4()
    await pool.execute(
        """
        INSERT INTO messenger.chats (id, title, created_by)
        SELECT gen_random_uuid(), 'c', $1 FROM generate_series(1, 600);
        INSERT INTO messenger.participants (id, chat_id, user_id)
        SELECT gen_random_uuid(), id, $1 FROM messenger.chats LIMIT 300;
        """.replace("$1", f"'{user}'::uuid")
    )
    await pool.execute(
        """
        INSERT INTO messenger.realtime_outbox
            (kind, target_kind, chat_id, message_id, seq, status)
        SELECT 'MessageReceived', 'ChatGroup', c.id, gen_random_uuid(), g,
               'Done'
        FROM generate_series(1, 20000) g
        JOIN (SELECT id, row_number() OVER () - 1 AS n FROM messenger.chats) c ON c.n = g % 600
        """
    )
    await pool.execute("ANALYZE messenger.realtime_outbox; ANALYZE messenger.participants")
    async with pool.acquire() as conn:
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                f"EXPLAIN {QUERIES['page']}", user, 1, UUID(int=0), 100, 10_000
            )
        )
    assert "ix_rto_sync" in plan, plan
    assert "Seq Scan on realtime_outbox" not in plan, plan
    assert "Index Scan using uq_participants_chat_user" in plan, plan
    async with pool.acquire() as conn:
        analyzed = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {QUERIES['page']}", user, 1, UUID(int=0), 100, 10_000
        )
    nodes = _plan_nodes(orjson.loads(analyzed)[0]["Plan"])
    table_scans = [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in
                   {"participants", "realtime_outbox"}]  # fmt: skip
    assert all(n["Relation Name"] == "participants" for n in table_scans), analyzed
    assert all(n["Actual Loops"] <= 1 for n in table_scans), analyzed


async def test_rows_of_other_chats_cost_no_probe_of_the_participant_key(
    pool: asyncpg.Pool, sync: Sync
) -> None:
    """A resume's cursor is behind rows that are nearly all other users' (a reconnect storm's
    shape): the caller's chats are read once per statement, so only the caller's own rows take
    the probe of the participant key (which checks joined_at); the 3,000 others do not."""
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        mine = await chats.create_chat(conn, creator=alice, title="mine", members=[bob])
    cursor = parse_cursor(await sync.cursor(bob))
    await others_rows(pool, 3000)
    async with pool.acquire() as conn:
        for n in range(3):
            await messages.send_message(conn, chat_id=mine, sender=alice, body=f"{n}")
    async with pool.acquire() as conn:
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {QUERIES['page']}",
            bob,
            cursor.xid,
            cursor.after_id,
            101,
            10_000,
        )
    nodes = _plan_nodes(orjson.loads(plan)[0]["Plan"])
    probes = [n for n in nodes if n.get("Index Name") == "uq_participants_chat_user"]
    outbox = [n for n in nodes if n.get("Relation Name") == "realtime_outbox"]
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in outbox) >= 3003, plan
    assert sum(n["Actual Loops"] for n in probes) <= 10, plan


@pytest.fixture
async def bounded(pool: asyncpg.Pool) -> AsyncIterator[tuple[Sync, httpx.AsyncClient]]:
    """Sync with a scan bound of 1,000 rows, a 0.5 s statement timeout, 2 pages per user."""
    options = SyncOptions(scan_limit=1000, statement_timeout=0.5, max_per_user=2)
    async with sync_api(pool, options) as api:
        yield api


async def test_a_page_examines_a_bounded_number_of_rows_whatever_the_log_holds(
    pool: asyncpg.Pool, bounded: tuple[Sync, httpx.AsyncClient]
) -> None:
    """H15: 20,000 rows of other users' chats after an old cursor, then one of the caller's.
    Each page examines at most the scan bound (1,000 rows, seen in the plan), answers no event
    with ``more`` and a cursor past what it examined; paging on reaches the caller's event."""
    sync, _ = bounded
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        mine = await chats.create_chat(conn, creator=alice, title="mine", members=[bob])
    since = await sync.cursor(bob)
    await others_rows(pool, 20000)
    async with pool.acquire() as conn:
        await messages.send_message(conn, chat_id=mine, sender=alice, body="at last")
    cursor = parse_cursor(since)
    async with pool.acquire() as conn:
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {QUERIES['page']}",
            bob,
            cursor.xid,
            cursor.after_id,
            101,
            1000,
        )
    scans = [n for n in _plan_nodes(orjson.loads(plan)[0]["Plan"]) if "Index Name" in n]
    outbox = [n for n in scans if n.get("Relation Name") == "realtime_outbox"]
    assert outbox, plan
    assert all(n["Actual Rows"] * n["Actual Loops"] <= 1000 for n in outbox), plan

    pages: list[dict[str, Any]] = []
    # On while `more`, or while rows wait behind a transaction open elsewhere on the cluster.
    while not pages or pages[-1]["more"] or pages[-1]["heldBack"]:
        r = await sync.get(bob, since=since, limit=100)
        assert r.status_code == 200, r.text
        pages.append(r.json())
        assert pages[-1]["nextCursor"] != since or not pages[-1]["more"]
        since = pages[-1]["nextCursor"]
        if pages[-1]["heldBack"]:
            await asyncio.sleep(0.05)
    bounded = [p for p in pages if p["more"]]
    assert 20 <= len(bounded) <= 21  # ~20,000 rows / 1,000 a page
    assert all(p["events"] == [] for p in bounded[:19])
    assert [e["payload"]["body"] for p in pages for e in p["events"]] == ["at last"]


async def test_a_users_pages_are_bounded_and_a_page_runs_under_a_statement_timeout(
    pool: asyncpg.Pool, bounded: tuple[Sync, httpx.AsyncClient]
) -> None:
    """H15: with every page held up (the retention floor's table locked), a user's third
    concurrent page is refused at once with 429 and Retry-After; the two held pages (and
    another user's) end at the 0.5 s statement timeout with 503 and Retry-After."""
    sync, _ = bounded
    bob, carol = uuid4(), uuid4()
    since = await sync.cursor(bob)
    other = await sync.cursor(carol)
    locker = await pool.acquire()
    try:
        async with locker.transaction():
            await locker.execute("LOCK messenger.realtime_sync_floor IN ACCESS EXCLUSIVE MODE")
            held = [asyncio.create_task(sync.get(bob, since=since)) for _ in range(2)]
            held.append(asyncio.create_task(sync.get(carol, since=other)))
            await asyncio.sleep(0.1)
            third = await sync.get(bob, since=since)
            assert third.status_code == 429, third.text
            assert third.headers["retry-after"] == "1"
            assert third.json()["error"] == "TooManyRequests"
            answers = await asyncio.gather(*held)
    finally:
        await pool.release(locker)
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "1", answer.text
        assert "timeout" in answer.json()["message"]
    again = await sync.get(bob, since=since)  # free again once they ended
    assert again.status_code == 200, again.text


async def test_pages_of_anyone_run_at_most_max_concurrent_at_once(pool: asyncpg.Pool) -> None:
    """H27: with one page at once (``REALTIME_SYNC_MAX_CONCURRENT=1``) and that page held up
    (the retention floor's table locked), the pages of other users wait their turn in the
    process, never on a database connection, and end at the timeout with 503; once it is
    free, they run again."""
    options = SyncOptions(
        scan_limit=1000, statement_timeout=0.5, max_per_user=2, max_concurrent=1, queue_timeout=0.5
    )
    async with sync_api(pool, options) as (sync, _):
        users = [uuid4() for _ in range(3)]
        cursors = [await sync.cursor(user) for user in users]
        locker = await pool.acquire()
        try:
            async with locker.transaction():
                await locker.execute("LOCK messenger.realtime_sync_floor IN ACCESS EXCLUSIVE MODE")
                held = [
                    asyncio.create_task(sync.get(user, since=cursor))
                    for user, cursor in zip(users, cursors, strict=True)
                ]

                async def waiting_on_the_lock() -> int:
                    return int(
                        await pool.fetchval(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                            " current_database() AND wait_event_type = 'Lock'"
                        )
                    )

                async def one_running() -> bool:
                    return await waiting_on_the_lock() > 0

                await wait_until(one_running, within=0.4)
                assert await waiting_on_the_lock() == 1  # the others wait for their turn
                answers = await asyncio.gather(*held)
        finally:
            await pool.release(locker)
        assert [a.status_code for a in answers] == [503, 503, 503]
        turns = [a.json()["message"] for a in answers if "no turn" in a.json()["message"]]
        assert len(turns) == 2, [a.json() for a in answers]
        for user, cursor in zip(users, cursors, strict=True):
            assert (await sync.get(user, since=cursor)).status_code == 200


async def test_pages_queued_for_their_turn_wait_past_the_statement_timeout(
    pool: asyncpg.Pool,
) -> None:
    """A storm of pages behind one turn at a time: a page waiting for its turn waits on this
    server, not on its statement, so it is answered once its turn comes (within
    ``queue_timeout``), not 503 at the statement timeout."""
    options = SyncOptions(
        scan_limit=1000, statement_timeout=0.5, max_per_user=2, max_concurrent=1, queue_timeout=20
    )
    async with sync_api(pool, options) as (sync, _):
        users = [uuid4() for _ in range(100)]
        cursors = [await sync.cursor(user) for user in users]
        answers = await asyncio.gather(
            *(sync.get(user, since=cursor) for user, cursor in zip(users, cursors, strict=True))
        )
    assert [a.status_code for a in answers] == [200] * len(users), [a.text for a in answers]


async def test_a_resume_near_the_end_is_answered_while_every_turn_scans_far(
    pool: asyncpg.Pool,
) -> None:
    """A page looks at the first ``TAIL_SCAN`` rows after its cursor in a lane of its own:
    with the one turn of far scans taken, a cursor near the log's end is answered, while one
    5,000 rows behind waits for that turn (503 at the queue timeout), and once it is free it is
    answered from one scan past those rows (not ``more`` at the tail's bound)."""
    options = SyncOptions(
        scan_limit=10_000, statement_timeout=2.0, max_concurrent=1, queue_timeout=0.3
    )
    service = SyncService(pool, default_payload_builder(MEDIA), options)
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await chats.create_chat(conn, creator=alice, title="near", members=[bob])
    far = (await service.page(carol, None)).next_cursor
    await others_rows(pool, 5000)
    assert TAIL_SCAN < 5000
    near = (await service.page(bob, None)).next_cursor
    async with pool.acquire() as conn:
        await messages.send_message(conn, chat_id=chat, sender=alice, body="back")

    async def page_of(user: UUID, since: str) -> Any:
        for _ in range(100):
            page = await service.page(user, since)
            if not page.held_back:
                return page
            await asyncio.sleep(0.05)  # a transaction open elsewhere on the cluster
        raise AssertionError("held back for 5 s")

    async with service._slots:  # every turn of the far scans taken
        resumed = await page_of(bob, near)
        assert [orjson.loads(e.payload_json)["body"] for e in resumed.events] == ["back"]
        with pytest.raises(SyncTimeout, match="no turn"):
            await page_of(carol, far)
    behind = await page_of(carol, far)
    assert (behind.events, behind.more, behind.limited) == ([], False, False)


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]
