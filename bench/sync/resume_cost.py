"""What a resume costs against what it missed: rows ``GET /api/sync`` hands a reconnecting Python
SDK client after a long session, with the cursor kept up during the session and without (as
before: the cursor moved only when the client resumed).

    python -m bench.sync.resume_cost [--sessions 1000,100000] [--missed 10] [--dsn DSN] [--smoke]

A ``realtime-dispatch serve`` (hub, REST, sync and dispatcher in one process, logs at warning)
on a scratch database ``bench_resume_*`` (dropped at the end). Two SDK clients in this process,
both members of one chat: ``kept`` with the default options (a keep-up read after every 1,000
live events or 5 s of quiet), ``before`` with the keep-up off. For each session size: the
session's messages are written in commits of 1,000 (``INSERT … generate_series``, the outbox
rows with them) and pushed live by the dispatcher to both; once both have every one, each
client leaves, ``--missed`` messages are written, and a new client resumes from the cursor the
old one left with (an application that keeps its cursor across restarts; the clients have the
application's own resync hook, so nothing but sync pages is read). Reported per client
and session: events the resume's sync pages held (``rows read``), its pages and wall time, and
the sync pages and events the client read during the session (the keep-up's cost). Writes
JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import sys
import time
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx

from bench._common import (
    DEFAULT_DSN,
    machine,
    parse_with_smoke,
    print_table,
    scratch_database,
    write_json,
)
from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.client import ClientOptions, MessageReceived, MessengerClient
from support.procs import free_port

SECRET = "a-bench-secret-of-at-least-32-bytes-long"
BULK = """
WITH c AS (
    UPDATE messenger.chats SET last_seq = last_seq + $2 WHERE id = $1
    RETURNING last_seq - $2 AS base
), m AS (
    INSERT INTO messenger.messages (id, chat_id, seq, sender_user_id, body)
    SELECT gen_random_uuid(), $1, c.base + g, $3, 'm' || (c.base + g)
    FROM c, generate_series(1, $2) g
    RETURNING id, seq
)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
SELECT 'MessageReceived', 'ChatGroup', $1, m.id, m.seq FROM m
"""
MODES = {
    "kept": ClientOptions(),
    "before": ClientOptions(cursor_every=10**9, cursor_idle=None),
}


def token(user: UUID) -> str:
    return mint_token(SECRET, user, ttl=3600)


def _no_history(reason: str, chat_id: object = None) -> None:
    """The resync hook: nothing to load (asked about the chat when first seen live)."""


class Member:
    """One SDK client of a member, counting the messages it was shown."""

    def __init__(self, base: str, user: UUID, options: ClientOptions) -> None:
        self.base, self.user, self.options = base, user, options
        self.received = 0
        self.want = 0
        self.reached = asyncio.Event()
        self.client = self._new()

    def _new(self, cursor: str | None = None) -> MessengerClient:
        # The application's own resync (a no-op: this bench shows no history): every read goes
        # through GET /api/sync, none through the REST history, which a new client would
        # otherwise fetch in full for the chat's first gap.
        client = MessengerClient(
            self.base, token(self.user), options=self.options, resync=_no_history
        )
        client.cursor = cursor
        client.on(MessageReceived, self._count)
        return client

    def _count(self, _: MessageReceived) -> None:
        self.received += 1
        if self.received >= self.want:
            self.reached.set()

    async def wait_for(self, count: int) -> None:
        self.want = count
        if self.received < count:
            self.reached.clear()
            await self.reached.wait()

    async def resume(self) -> dict[str, Any]:
        """A new client from the old one's cursor; what its resume read."""
        client = self._new(self.client.cursor)
        self.client = client
        resumed = asyncio.Event()
        first: dict[str, int] = {}

        def done(missed: int) -> None:
            if not first:  # the resume itself (a later read on would be counted apart)
                stats = client.stats
                first.update(read=stats.last_resume_read, pages=stats.sync_pages, missed=missed)
            resumed.set()

        client.on_resumed(done)
        started = time.perf_counter()
        async with client:
            await resumed.wait()
            elapsed = time.perf_counter() - started
            await client.settled()
        return {
            "rows_read": first["read"],
            "pages": first["pages"],
            "missed": first["missed"],
            "seconds": round(elapsed, 3),
            "full_resyncs": client.stats.full_resyncs,
        }


async def session(
    url: str, members: dict[str, Member], *, chat: UUID, writer: UUID, size: int, missed: int
) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for member in members.values():
                member.received = 0
                await stack.enter_async_context(member.client)
            for member in members.values():
                await member.client.wait_connected()
                await member.client.settled()
            started = {name: dataclasses.replace(m.client.stats) for name, m in members.items()}
            for offset in range(0, size, 1000):
                await conn.execute(BULK, chat, min(1000, size - offset), writer)
                want = min(size, offset + 1000)
                await asyncio.gather(*(m.wait_for(want) for m in members.values()))
                if want % 10_000 == 0:
                    print(f"session {size}: {want} shown", file=sys.stderr, flush=True)
            for member in members.values():
                await member.client.settled()
            cost = {
                name: {
                    "session_pages": m.client.stats.sync_pages - started[name].sync_pages,
                    "session_events": m.client.stats.sync_events - started[name].sync_events,
                    "keep_up_reads": m.client.stats.cursor_reads - started[name].cursor_reads,
                }
                for name, m in members.items()
            }
        await conn.execute(BULK, chat, missed, writer)  # nobody connected: pushed to no one
        await asyncio.sleep(0.5)  # the dispatcher finds no connection for them
        results = {}
        for name, member in members.items():
            print(f"session {size}: {name} resumes", file=sys.stderr, flush=True)
            results[name] = {**cost[name], **await member.resume()}
        return results
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(n) for n in args.sessions.split(",")]
    async with scratch_database(args.dsn, "resume") as url:
        port = free_port()
        env = {
            **os.environ,
            "REALTIME_DATABASE_URL": url,
            "REALTIME_HUB_JWT_SECRET": SECRET,
            "REALTIME_LOG_LEVEL": "warning",
        }
        serve = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "realtime_dispatch.cli.main", "serve",
            "--host", "127.0.0.1", "--port", str(port), env=env,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                for _ in range(600):
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
                writer, users = uuid4(), {name: uuid4() for name in MODES}
                created = await http.post(
                    "/api/chats",
                    json={"title": "bench", "memberUserIds": [str(u) for u in users.values()]},
                    headers={"Authorization": f"Bearer {token(writer)}"},
                )
                created.raise_for_status()
                chat = UUID(created.json()["chatId"])
            out: dict[str, Any] = {}
            for size in sizes:
                members = {name: Member(base, users[name], MODES[name]) for name in MODES}
                # Each session starts from its own first connect (a fresh cursor).
                out[str(size)] = await session(
                    url, members, chat=chat, writer=writer, size=size, missed=args.missed
                )
            return out
        finally:
            serve.terminate()
            await serve.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sessions", default="1000,100000", help="session sizes (events)")
    parser.add_argument("--missed", type=int, default=10, help="messages written while away")
    args = parse_with_smoke(parser, {"sessions": "2500", "missed": 5})
    started = time.perf_counter()
    results = asyncio.run(run(args))
    rows = []
    for size, by_mode in results.items():
        for mode, r in by_mode.items():
            rows.append(
                [
                    size,
                    mode,
                    r["rows_read"],
                    r["missed"],
                    r["pages"],
                    r["seconds"],
                    r["session_pages"],
                    r["session_events"],
                ]
            )
    print_table(
        [
            "session",
            "client",
            "rows read",
            "missed",
            "resume pages",
            "resume s",
            "session pages",
            "session events read",
        ],
        rows,
    )
    path = write_json(
        "resume_cost",
        {
            "args": vars(args),
            "machine": machine(),
            "results": results,
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
