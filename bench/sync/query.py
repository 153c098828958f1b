"""The cost of one ``GET /api/sync`` page query at scale: 1,000 chats per caller, 1M retained
outbox rows.

    python -m bench.sync.query [--dsn DSN] [--rows 1000000] [--chats 10000] [--mine 1000]
                               [--repeat 15] [--scan 10000] [--schema reference|own|both]

``--schema own``: the same seed and cells on an adopter's schema (``examples/own-schema``: its
``Conversations`` and ``ConversationMembers``), timing the page composed over that manifest's
``member_spans`` (``realtime_dispatch.sync.store.spans_page``) instead of the reference ``page``;
``--schema both``: the two seeded side by side, each cell timed on one and at once on the other.

In a scratch database ``bench_sync_*`` (dropped at the end): ``--chats`` chats, the caller an
active member of ``--mine`` of them (joined before any row), and ``--rows`` Done
``MessageReceived`` rows spread evenly over all chats, written in 200 transactions (so the
rows carry 200 different xids), then ANALYZE. It times the page query itself
(``realtime_dispatch.sync`` ``page``, the statement the endpoint runs once per page; the payload
building after it is the dispatcher's own, measured in ``bench/dispatch/drain.py``), as prepared
statements the way asyncpg runs them, for a cursor

* at the tail (the last 1% of the rows are new: a client back after a short absence),
* in the middle (half the log behind), and at the start (the whole 1M behind),

with pages of 100 and 1,000 events, and for a caller in no chat at all (every row is scanned
and refused: the worst case, bounded by ``--scan``, the page's scan bound). It reports the
median and p95 of ``--repeat`` runs and, from one ``EXPLAIN (ANALYZE, BUFFERS)``, the rows the
index scan walked, the buffers it touched and those of the whole statement (the membership
probes included). Writes JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from bench._common import (
    DEFAULT_DSN,
    machine,
    parse_with_smoke,
    print_table,
    scratch_database,
    server_facts,
    write_json,
)
from realtime_dispatch.manifest.manifest import load_manifest
from realtime_dispatch.sync.store import QUERIES, spans_page

BATCHES = 200
OWN_SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "own-schema"

SEED_CHATS = """
INSERT INTO messenger.chats (id, title, created_by, created_at)
SELECT gen_random_uuid(), 'bench', $1, now() - interval '1 day' FROM generate_series(1, $2)
"""
SEED_MINE = """
INSERT INTO messenger.participants (id, chat_id, user_id, joined_at)
SELECT gen_random_uuid(), id, $1, now() - interval '1 day' FROM chat_numbers WHERE n % $2 = 0
"""
OWN_CHATS = """
INSERT INTO "Conversations" ("Id", "Topic", "CreatedUtc")
SELECT gen_random_uuid(), 'bench', now() - interval '1 day' FROM generate_series(1, $2)
WHERE $1::uuid IS NOT NULL
"""
OWN_MINE = """
INSERT INTO "ConversationMembers" ("Id", "ConversationId", "AccountId", "JoinedUtc")
SELECT gen_random_uuid(), id, $1, now() - interval '1 day' FROM chat_numbers WHERE n % $2 = 0
"""


@dataclass(frozen=True, slots=True)
class Schema:
    """Where the chats and the caller's memberships go, and the page query over them."""

    chats: str
    mine: str
    chat_table: str
    chat_id: str
    members: str
    query: str


def schemas() -> dict[str, Schema]:
    spans = load_manifest(OWN_SCHEMA / "projections.sql").sql("member_spans")
    assert spans is not None
    return {
        "reference": Schema(
            SEED_CHATS, SEED_MINE, "messenger.chats", "id", "messenger.participants",
            QUERIES["page"],
        ),
        "own": Schema(
            OWN_CHATS, OWN_MINE, '"Conversations"', '"Id"', '"ConversationMembers"',
            spans_page(spans),
        ),
    }  # fmt: skip


SEED_ROWS = """
INSERT INTO messenger.realtime_outbox
    (id, kind, target_kind, chat_id, message_id, seq, status, created_at)
SELECT messenger.realtime_new_id(), 'MessageReceived', 'ChatGroup', c.id, gen_random_uuid(), g,
       'Done', now()
FROM generate_series($1::int, $2::int) g
JOIN chat_numbers c ON c.n = g % $3
"""


async def seed(conn: asyncpg.Connection, schema: Schema, rows: int, chats: int, mine: int) -> UUID:
    caller = uuid4()
    await conn.execute(schema.chats, uuid4(), chats)
    await conn.execute(
        f"CREATE UNLOGGED TABLE chat_numbers AS SELECT {schema.chat_id} AS id,"
        f" (row_number() OVER (ORDER BY {schema.chat_id}) - 1)::int AS n FROM {schema.chat_table};"
        " CREATE INDEX ON chat_numbers (n)"
    )
    await conn.execute(schema.mine, caller, chats // mine)  # every (chats/mine)-th chat
    step = rows // BATCHES
    for start in range(0, rows, step):
        await conn.execute(SEED_ROWS, start, min(rows, start + step) - 1, chats)
    await conn.execute("DROP TABLE chat_numbers")
    await conn.execute("VACUUM ANALYZE messenger.realtime_outbox")
    await conn.execute(f"ANALYZE {schema.members}")
    return caller


async def cursor_at(conn: asyncpg.Connection, share_behind: float) -> tuple[int, UUID]:
    """The (xid, id) position with ``share_behind`` of the rows after it."""
    total = await conn.fetchval("SELECT count(*) FROM messenger.realtime_outbox")
    skip = int(total * (1 - share_behind))
    if skip == 0:
        return 1, UUID(int=0)
    row = await conn.fetchrow(
        "SELECT xid, id FROM messenger.realtime_outbox ORDER BY xid, id OFFSET $1 LIMIT 1",
        skip - 1,
    )
    assert row is not None
    return int(row["xid"]), row["id"]


async def time_page(  # noqa: PLR0917 (one cell of the table)
    conn: asyncpg.Connection,
    query: str,
    user: UUID,
    position: tuple[int, UUID],
    limit: int,
    repeat: int,
    scan: int,
) -> dict[str, Any]:
    statement = await conn.prepare(query)
    times = []
    found = 0
    for _ in range(repeat):
        started = time.perf_counter()
        records = await statement.fetch(user, position[0], position[1], limit + 1, scan)
        times.append((time.perf_counter() - started) * 1000)
        found = sum(1 for r in records if r["id"] is not None)
    plan = await conn.fetchval(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}",
        user,
        position[0],
        position[1],
        limit + 1,
        scan,
    )
    top = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    walked = _node(top)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
        "events": found,
        "index_rows_walked": walked.get("Actual Rows", 0) + walked.get("Rows Removed by Filter", 0),
        "buffers": walked.get("Shared Hit Blocks", 0) + walked.get("Shared Read Blocks", 0),
        # The whole statement's, the membership probes included (a node counts its children's).
        "plan_buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        "index": walked.get("Index Name"),
    }


def _node(plan: dict[str, Any]) -> dict[str, Any]:
    """The outbox scan of the plan."""
    if plan.get("Relation Name") == "realtime_outbox":
        return plan
    for child in plan.get("Plans", ()):
        found = _node(child)
        if found:
            return found
    return {}


@dataclass(frozen=True, slots=True)
class Seeded:
    name: str
    schema: Schema
    conn: asyncpg.Connection
    caller: UUID
    summary: str


async def seeded(stack: contextlib.AsyncExitStack, args: argparse.Namespace, name: str) -> Seeded:
    """One schema seeded in its own scratch database (dropped when ``stack`` closes)."""
    schema = schemas()[name]
    url = await stack.enter_async_context(scratch_database(args.dsn, "bench_sync"))
    conn = await asyncpg.connect(url)
    stack.push_async_callback(conn.close)
    if name == "own":
        await conn.execute((OWN_SCHEMA / "schema.sql").read_text())
    started = time.perf_counter()
    caller = await seed(conn, schema, args.rows, args.chats, args.mine)
    took = time.perf_counter() - started
    size = await conn.fetchval("SELECT pg_size_pretty(pg_relation_size('messenger.ix_rto_sync'))")
    summary = f"{name}: seeded {args.rows} rows in {took:.0f} s; ix_rto_sync is {size}"
    return Seeded(name, schema, conn, caller, summary)


async def run_cells(
    args: argparse.Namespace, names: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every cell, the schemas side by side: each cell is timed on one schema, then at once on
    the next, so that both see the same load."""
    async with contextlib.AsyncExitStack() as stack:
        runs = [await seeded(stack, args, name) for name in names]
        outsider = uuid4()
        results = []
        for where, share in (("tail (1% new)", 0.01), ("middle", 0.5), ("start", 1.0)):
            positions = [await cursor_at(run.conn, share) for run in runs]
            for who in (f"member of {args.mine:,}", "in no chat"):
                for limit in (100, 1000):
                    if who == "in no chat" and limit == 1000:
                        continue  # the same walk as with 100: nothing matches
                    for run, position in zip(runs, positions, strict=True):
                        user = outsider if who == "in no chat" else run.caller
                        measured = await time_page(
                            run.conn, run.schema.query, user, position, limit, args.repeat,
                            args.scan,
                        )  # fmt: skip
                        cell = {"schema": run.name, "cursor": where, "caller": who, "limit": limit}
                        results.append({**cell, **measured})
        return results, [run.summary for run in runs]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--mine", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--scan", type=int, default=10_000, help="rows a page examines (REALTIME_SYNC_SCAN_LIMIT)"
    )
    parser.add_argument(
        "--schema",
        choices=["reference", "own", "both"],
        default="reference",
        help="the reference messenger's tables, examples/own-schema's over member_spans, or"
        " both side by side (each cell timed on one, then at once on the other)",
    )
    smoke = {"rows": 20_000, "chats": 200, "mine": 20, "repeat": 3, "schema": "both"}
    args = parse_with_smoke(parser, smoke)
    names = ["reference", "own"] if args.schema == "both" else [args.schema]
    results, summaries = await run_cells(args, names)
    facts = await server_facts(args.dsn)
    columns = ["schema", "cursor", "caller", "limit", "median_ms", "p95_ms", "events",
               "index_rows_walked", "buffers", "plan_buffers"]  # fmt: skip
    print_table(columns, [[r[c] for c in columns] for r in results])
    print("\n".join(summaries))
    write_json(
        "sync_query",
        {"args": vars(args), "machine": machine(), "server": facts, "results": results},
    )


if __name__ == "__main__":
    asyncio.run(main())
