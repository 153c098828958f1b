"""A kind declared in the manifest for the benchmarks (issue 48): ``BenchPosted``, the reference
messenger's message as an app would declare it, read by a query of the same columns as the
built-in ``messages`` one. ``halve`` turns every other Pending ``MessageReceived`` row into it
(or, for the built-in side of a comparison, rewrites the same rows to the kind they had, so both
sides carry the same dead tuples before the VACUUM)."""

from __future__ import annotations

import asyncpg

from realtime_dispatch.manifest.manifest import Manifest, parse_manifest, shipped_manifest
from realtime_dispatch.manifest.registry import register_kinds

KIND = "BenchPosted"
BLOCK = """
-- kind: BenchPosted
-- target: chat
-- event: bench_posted
SELECT m.id AS ref_id, m.chat_id, m.id AS message_id, m.seq, m.sender_user_id, m.kind, m.body,
       m.sent_at
FROM messenger.messages m WHERE m.id = ANY($1::uuid[]);
"""


def manifest() -> Manifest:
    """The shipped manifest with ``BenchPosted`` declared."""
    named = "".join(f"-- name: {n}\n{q};\n" for n, q in shipped_manifest().queries.items())
    return parse_manifest(named + BLOCK, "bench/dispatch/_declared.py")


async def register(conn: asyncpg.Connection) -> None:
    await register_kinds(conn, manifest())


async def halve(conn: asyncpg.Connection, kind: str) -> int:
    """Every other Pending row (even ``seq``) becomes ``kind`` with its message as ``ref_id``."""
    status = await conn.execute(
        "UPDATE messenger.realtime_outbox SET kind = $1, ref_id = message_id"
        " WHERE status = 'Pending' AND seq % 2 = 0",
        kind,
    )
    return int(status.rsplit(" ", 1)[1])
