"""Real processes, a self-healing raw hub listener, completeness checks and the figures the
chaos tests report.

Counts scale with environment variables so that CI runs a small version of every scenario and
the documented run uses the issue's numbers: ``REALTIME_CHAOS_MESSAGES`` (messages per crash
run), ``REALTIME_CHAOS_KILLS`` (kill -9 per crash run), ``REALTIME_CHAOS_FAULTS`` (repetitions
of the other faults). ``REALTIME_CHAOS_REPORT`` names a JSON-lines file each scenario appends its
figures to (they are printed either way)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx
import orjson
from websockets.asyncio.client import connect

from realtime_dispatch.messenger import commands
from support.hub_wire import RS, SECRET, make_token
from support.procs import Proc, cli_env, free_port, wait_until

SERVICE_KEY = "chaos-service-key"
# What a client of a database that is going away sees.
RETRYABLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)


def scale(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def report(scenario: str, **figures: Any) -> None:
    line = orjson.dumps({"scenario": scenario, **figures}).decode()
    print(f"CHAOS {line}")
    target = os.environ.get("REALTIME_CHAOS_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def base_env(database_url: str, **extra: str) -> dict[str, str]:
    values = {
        "REALTIME_DATABASE_URL": database_url,
        "REALTIME_HUB_JWT_SECRET": SECRET,
        "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
        "REALTIME_DISPATCH_POLLING_INTERVAL": "0.2",
        "REALTIME_DISPATCH_BACKOFF_BASE": "0.2",
        "REALTIME_DISPATCH_BACKOFF_CAP": "1",
        "REALTIME_LOG_LEVEL": "info",
    }
    values.update(extra)
    return cli_env(**values)


@contextlib.asynccontextmanager
async def processes() -> AsyncIterator[list[Proc]]:
    """Every process appended to the list is SIGKILLed at the end if it still runs."""
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.alive:
                await proc.kill()


def hub_proc(env: dict[str, str], log_dir: Path, name: str = "hub", command: str = "hub") -> Proc:
    return Proc((command,), env, log_dir / f"{name}.log", port=free_port())


def worker_proc(env: dict[str, str], log_dir: Path, name: str = "worker") -> Proc:
    return Proc(("worker",), env, log_dir / f"{name}.log")


@dataclass
class Listener:
    """One user's raw JSON hub connection that reconnects by itself and records every
    ``message_received`` push as (chatId, seq)."""

    user: UUID
    urls: list[str]
    received: list[tuple[str, int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # every invocation, if kept
    keep_events: bool = False
    connects: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _url_index: int = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _record(self, record: dict[str, Any]) -> None:
        if self.keep_events:
            self.events.append(record)
        if record["target"] == "message_received":
            payload = record["arguments"][0]
            self.received.append((payload["chatId"], int(payload["seq"])))

    @staticmethod
    async def _ping(ws: Any) -> None:
        """Keep-alive as every SignalR client does (the hub closes clients silent for 30 s)."""
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(10)
                await ws.send('{"type":6}' + RS)

    async def _run(self) -> None:
        token = make_token(self.user, ttl=3600)
        while True:
            url = self.urls[self._url_index % len(self.urls)]
            try:
                async with connect(
                    f"{url}?access_token={token}", ping_interval=None, max_size=None
                ) as ws:
                    await ws.send('{"protocol":"json","version":1}' + RS)
                    pinger = asyncio.create_task(self._ping(ws))
                    try:
                        partial = ""
                        handshaken = False
                        async for frame in ws:
                            text = frame if isinstance(frame, str) else frame.decode()
                            *complete, partial = (partial + text).split(RS)
                            for raw in complete:
                                record = orjson.loads(raw)
                                if not handshaken:
                                    handshaken = True
                                    self.connects += 1
                                    self.connected.set()
                                    continue
                                if record.get("type") == 1:
                                    self._record(record)
                    finally:
                        pinger.cancel()
            except Exception:  # any transport or protocol failure: reconnect
                pass
            self.connected.clear()
            self._url_index += 1
            await asyncio.sleep(0.1)


@dataclass
class Timeline:
    """What a client ends up with for one chat after resync: live pushes deduplicated by seq plus
    the REST refetch after the highest contiguous seq."""

    live_pushes: int
    repeated_pushes: int
    recovered_by_resync: int
    seqs: list[int]


async def resync(
    http_url: str, user: UUID, chat: UUID, received: Iterable[tuple[str, int]]
) -> Timeline:
    mine = [seq for chat_id, seq in received if chat_id == str(chat)]
    have = set(mine)
    contiguous = 0
    while contiguous + 1 in have:
        contiguous += 1
    fetched: list[int] = []
    after = contiguous
    headers = {"Authorization": f"Bearer {make_token(user)}"}
    async with httpx.AsyncClient(base_url=http_url, headers=headers, timeout=30) as http:
        while True:
            answer = await http.get(
                f"/api/chats/{chat}/messages", params={"afterSeq": after, "limit": 200}
            )
            assert answer.status_code == 200, answer.text
            items = answer.json()["items"]
            if not items:
                break
            fetched.extend(int(item["seq"]) for item in items)
            after = int(items[-1]["seq"])
    recovered = [seq for seq in fetched if seq not in have]
    merged = sorted(have | set(fetched))
    return Timeline(len(mine), len(mine) - len(have), len(recovered), merged)


async def outbox_status(pool: asyncpg.Pool, kind: str | None = None) -> dict[str, int]:
    """The outbox rows by status: all of them, or those of ``kind``."""
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM messenger.realtime_outbox"
        " WHERE $1::text IS NULL OR kind = $1 GROUP BY status",
        kind,
    )
    return {r["status"]: int(r["n"]) for r in rows}


async def message_rows_status(pool: asyncpg.Pool, chats: list[tuple[UUID, UUID]]) -> dict[str, int]:
    """The status of the message rows (``MessageReceived``), once the rest of the outbox is
    accounted for: it must hold nothing but one creation push per chat of ``chats`` (the
    ``ChatUpdated`` row with ``eventKind: ChatCreated`` that :func:`make_chats`' ``create_chat``
    writes), each Done. So a scenario counts its messages' rows exactly, and a creation push
    that was lost, repeated or left behind fails it as well."""
    rows = await pool.fetch(
        "SELECT o.kind, o.chat_id, o.status, e.event_kind, count(*) AS n"
        " FROM messenger.realtime_outbox AS o"
        " LEFT JOIN messenger.chat_events AS e ON o.kind = 'ChatUpdated' AND e.id = o.ref_id"
        " WHERE o.kind <> 'MessageReceived' GROUP BY 1, 2, 3, 4"
    )
    others = {(r["kind"], r["chat_id"], r["status"], r["event_kind"]): int(r["n"]) for r in rows}
    expected = {("ChatUpdated", chat, "Done", "ChatCreated"): 1 for chat, _sender in chats}
    assert others == expected, others
    return await outbox_status(pool, kind="MessageReceived")


async def wait_drained(pool: asyncpg.Pool, within: float = 120) -> dict[str, int]:
    async def drained() -> bool:
        return (await outbox_status(pool)).get("Pending", 0) == 0

    await wait_until(drained, within=within, interval=0.1)
    return await outbox_status(pool)


async def make_chats(
    pool: asyncpg.Pool, count: int, listeners: list[UUID]
) -> list[tuple[UUID, UUID]]:
    """``count`` chats, each with a fresh sender and every listener as a member. Each creation
    writes its push (one ``ChatUpdated`` row, ``eventKind: ChatCreated``); a scenario that
    counts rows takes them apart with :func:`message_rows_status`."""
    chats = []
    async with pool.acquire() as conn:
        for _ in range(count):
            sender = uuid4()
            chat = await commands.create_chat(
                conn, creator=sender, title="chaos", members=listeners
            )
            chats.append((chat, sender))
    return chats


async def write_messages(
    pool: asyncpg.Pool,
    chats: list[tuple[UUID, UUID]],
    total: int,
    sent: list[int],
    *,
    body: str = "chaos",
    rate: float | None = None,
) -> None:
    """Owners: one writer per chat, ``total`` messages overall; ``sent[0]`` counts commits.
    Retries a commit that failed because the database went away (nothing half-written: the
    message and its outbox row commit together or not at all). ``rate`` paces the owners
    (messages per second overall) so that a run outlasts the faults injected into it."""
    started = time.monotonic()
    per_writer = rate / len(chats) if rate else None

    async def writer(chat: UUID, sender: UUID, count: int) -> None:
        for k in range(count):
            if per_writer is not None:
                delay = started + k / per_writer - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with pool.acquire() as conn:
                        await commands.send_message(conn, chat_id=chat, sender=sender, body=body)
                    break
                except RETRYABLE:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            sent[0] += 1

    share, extra = divmod(total, len(chats))
    await asyncio.gather(
        *(
            writer(chat, sender, share + (1 if i < extra else 0))
            for i, (chat, sender) in enumerate(chats)
        )
    )


async def check_timelines(
    http_url: str,
    listeners: list[Listener],
    chats: list[tuple[UUID, UUID]],
    pool: asyncpg.Pool,
    members: dict[UUID, set[UUID]] | None = None,
) -> dict[str, int]:
    """Every listener's timeline of every chat it belongs to (all chats unless ``members``
    says otherwise) is 1..lastSeq after resync; returns totals."""
    totals = {
        "live_pushes": 0,
        "repeated_pushes": 0,
        "recovered_by_resync": 0,
        "client_reconnects": sum(listener.connects - 1 for listener in listeners),
    }
    for chat, _sender in chats:
        last = int(
            await pool.fetchval("SELECT max(seq) FROM messenger.messages WHERE chat_id = $1", chat)
            or 0
        )
        for listener in listeners:
            if members is not None and listener.user not in members[chat]:
                continue
            timeline = await resync(http_url, listener.user, chat, listener.received)
            assert timeline.seqs == list(range(1, last + 1)), (
                f"user {listener.user} chat {chat}: {len(timeline.seqs)} of {last}"
            )
            totals["live_pushes"] += timeline.live_pushes
            totals["repeated_pushes"] += timeline.repeated_pushes
            totals["recovered_by_resync"] += timeline.recovered_by_resync
    return totals


def delivery_figures(totals: dict[str, int]) -> dict[str, int]:
    """The client side of a chaos report from :func:`check_timelines`' totals: nothing lost and
    nothing duplicated after resync (it asserts both), and the pushes and resyncs behind that."""
    return {"lost": 0, "duplicated_at_client_after_resync": 0, **totals}


async def invariants(pool: asyncpg.Pool) -> None:
    """No partial write: every message has exactly one MessageReceived row and vice versa; the
    schema is intact."""
    orphans = await pool.fetchval(
        """
        SELECT count(*) FROM messenger.messages AS m
        WHERE (SELECT count(*) FROM messenger.realtime_outbox AS o
               WHERE o.message_id = m.id AND o.kind = 'MessageReceived') <> 1
        """
    )
    assert orphans == 0
    dangling = await pool.fetchval(
        """
        SELECT count(*) FROM messenger.realtime_outbox AS o
        WHERE o.kind = 'MessageReceived'
          AND NOT EXISTS (SELECT 1 FROM messenger.messages AS m WHERE m.id = o.message_id)
        """
    )
    assert dangling == 0


@contextlib.asynccontextmanager
async def serving(database_url: str, tmp_path: Path, **env: str) -> Any:
    # A media secret as a deployment configures it: outside development mode none is made up,
    # and the media routes would answer 503.
    env = {"REALTIME_MEDIA_JITSI_APP_SECRET": "hostile-input-jitsi-secret", **env}
    async with processes() as procs:
        serve = hub_proc(base_env(database_url, **env), tmp_path, name="serve", command="serve")
        procs.append(serve)
        await serve.start()
        yield serve
        assert serve.alive, serve.log_text()[-3000:]
        assert await serve.stop() == 0
