"""Primary failover under load: a primary and an asynchronous streaming standby; a hub and a
worker (and the owners) use one multi-host URL with ``target_session_attrs=read-write``. While
owners write, the standby is promoted and the primary stopped (immediate: as in a crash). The
processes find the new primary by themselves. Everything on the new primary is delivered and ends
Done; what the owners committed on the old primary but never reached the standby is counted, and
is gone together with its domain change (no message without its outbox row, no row without its
message). Figures go to docs/RELIABILITY.md."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import pytest

from realtime_dispatch.messenger import commands
from realtime_dispatch.messenger.schema import migrate
from support.procs import wait_until
from tests.chaos.harness import (
    RETRYABLE,
    Listener,
    base_env,
    hub_proc,
    invariants,
    make_chats,
    message_rows_status,
    processes,
    report,
    worker_proc,
)
from tests.chaos.pipeline import time_to_progress
from tests.replication import replicated_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

RATE = 40.0  # owner commits per second, overall
BEFORE, AFTER = 2.0, 3.0  # seconds of writing before the failover and after it


async def owner(
    url: str, chats: list[tuple[UUID, UUID]], committed: dict[UUID, float], stop: asyncio.Event
) -> None:
    """Writes a message now and then, retrying what failed; ``committed``: each message the
    owner saw committed, and when (an owner whose COMMIT was cut cannot know: retried, it may
    exist twice, as with any database)."""
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2, timeout=5)
    assert pool is not None
    try:
        k = 0
        while not stop.is_set():
            chat, sender = chats[k % len(chats)]
            k += 1
            try:
                async with pool.acquire() as conn:
                    sent = await commands.send_message(conn, chat_id=chat, sender=sender, body="f")
                committed[sent.message_id] = time.monotonic()
            except (*RETRYABLE, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            await asyncio.sleep(1 / RATE)
    finally:
        pool.terminate()


async def test_primary_failover_resumes_by_itself(tmp_path: Path) -> None:
    cluster = await replicated_cluster()
    try:
        seed = await asyncpg.connect(cluster.url("postgres", cluster.primary))
        await seed.execute("CREATE DATABASE failover")
        await seed.close()
        url = cluster.url("failover", cluster.primary, cluster.standby)
        conn = await asyncpg.connect(url)
        await migrate(conn)
        await conn.close()
        users = [uuid4()]
        setup = await asyncpg.create_pool(url, min_size=1, max_size=2)
        assert setup is not None
        chats = await make_chats(setup, 2, users)
        await setup.close()

        env = base_env(url, REALTIME_DISPATCH_MAX_ATTEMPTS="1000")
        committed: dict[UUID, float] = {}
        stop = asyncio.Event()
        async with processes() as procs:
            hub = hub_proc(env, tmp_path)
            procs.append(hub)
            await hub.start()
            worker = worker_proc({**env, "REALTIME_HUB_URL": hub.http_url}, tmp_path)
            procs.append(worker)
            await worker.start()
            listener = Listener(users[0], [hub.ws_url], keep_events=True)
            listener.start()
            writing: asyncio.Task[None] | None = None
            try:
                # The owner writes once the listener is in its chats' groups (the hub answers the
                # handshake after loading them): a message committed before that reaches it by
                # resync, not live, and this test counts live pushes.
                await asyncio.wait_for(listener.connected.wait(), 30)
                writing = asyncio.create_task(owner(url, chats, committed, stop))
                await asyncio.sleep(BEFORE)
                await wait_until(
                    lambda: any(e["target"] == "message_received" for e in listener.events),
                    within=30,
                )
                failover_at = time.monotonic()
                await asyncio.to_thread(cluster.promote_standby)
                await asyncio.to_thread(cluster.stop, cluster.primary)
                stopped_at = time.monotonic()
                new = await asyncpg.create_pool(
                    cluster.url("failover", cluster.standby), min_size=1, max_size=2
                )
                assert new is not None
                try:
                    # Time without dispatch: from the old primary's stop to a row turning Done
                    # on the new one.
                    resumed_after = await time_to_progress(new, stopped_at)
                    await asyncio.sleep(max(0.0, AFTER - (time.monotonic() - stopped_at)))
                    stop.set()
                    await writing

                    async def drained() -> bool:
                        return not await new.fetchval(
                            "SELECT count(*) FROM messenger.realtime_outbox WHERE status <> 'Done'"
                        )

                    await wait_until(drained, within=120, interval=0.1)
                    on_new = {
                        r["id"]: r["seq"]
                        for r in await new.fetch("SELECT id, seq FROM messenger.messages")
                    }
                    await invariants(new)  # every message has its row, every row its message
                    statuses = await message_rows_status(new, chats)
                finally:
                    await new.close()

                def pushed_ids() -> list[str]:
                    return [
                        e["arguments"][0]["messageId"]
                        for e in listener.events
                        if e["target"] == "message_received"
                    ]

                await wait_until(lambda: {str(m) for m in on_new} <= set(pushed_ids()), within=60)
            finally:
                stop.set()
                if writing is not None:
                    with contextlib.suppress(BaseException):
                        await writing
                await listener.close()
            assert worker.alive, worker.log_text()[-3000:]
            assert hub.alive, hub.log_text()[-3000:]
            assert await worker.stop() == 0
            assert await hub.stop() == 0

        pushed = pushed_ids()
        lost = [m for m in committed if m not in on_new]
        # What was lost was committed on the old primary around the failover, never after it.
        assert all(committed[m] <= stopped_at for m in lost)
        after_failover = [m for m, at in committed.items() if at > stopped_at]
        assert after_failover, "no owner commit after the failover"
        assert all(m in on_new for m in after_failover)
        assert statuses == {"Done": len(on_new)}, statuses
        counts: dict[str, int] = {}
        for m in pushed:
            counts[m] = counts.get(m, 0) + 1
        # A lost message's seq is given again on the new primary, to another message: a client
        # that dedupes by (chatId, seq) alone would drop that one (docs/RELIABILITY.md).
        by_seq: dict[tuple[str, int], set[str]] = {}
        for e in listener.events:
            if e["target"] == "message_received":
                payload = e["arguments"][0]
                key = (payload["chatId"], int(payload["seq"]))
                by_seq.setdefault(key, set()).add(payload["messageId"])
        report(
            "primary failover (promote standby, stop primary), hub + worker on a multi-host URL",
            owner_commits=len(committed),
            on_new_primary=len(on_new),
            lost_unreplicated_commits=len(lost),
            lost_that_had_been_pushed=sum(1 for m in lost if str(m) in counts),
            repeated_pushes=sum(n - 1 for n in counts.values()),
            seqs_pushed_for_two_messages=sum(1 for ids in by_seq.values() if len(ids) > 1),
            seconds_promote_to_primary_stopped=round(stopped_at - failover_at, 3),
            seconds_without_dispatch_after_primary_stopped=resumed_after,
        )
    finally:
        await asyncio.to_thread(cluster.teardown)
