"""Through PgBouncer in transaction pooling mode: ``REALTIME_DATABASE_URL`` points at PgBouncer,
``REALTIME_DATABASE_SESSION_URL`` at PostgreSQL itself (LISTEN, the advisory locks, the
membership feed, migrations). ``serve``, and then ``hub`` + ``worker``, deliver what owners
write through PgBouncer too (over REST, and with their own asyncpg pool)."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID, uuid4

import asyncpg
import httpx
import pytest

from realtime_dispatch.messenger import commands
from support.hub_wire import make_token
from support.procs import wait_until
from tests.chaos.harness import Listener, Proc, base_env, hub_proc, make_chats, processes
from tests.pgbouncer import pgbouncer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


async def owner_writes(
    bouncer_pool: asyncpg.Pool, http_url: str, chat: UUID, sender: UUID, count: int
) -> None:
    """Half over REST (the owner service's pool goes through PgBouncer), half with an owner's
    own pool on PgBouncer (asyncpg without named prepared statements)."""
    headers = {"Authorization": f"Bearer {make_token(sender)}"}
    async with httpx.AsyncClient(base_url=http_url, headers=headers, timeout=30) as http:
        for i in range(count // 2):
            answer = await http.post(f"/api/chats/{chat}/messages", json={"body": f"rest {i}"})
            assert answer.status_code == 201, answer.text
    async with bouncer_pool.acquire() as conn:
        for i in range(count - count // 2):
            await commands.send_message(conn, chat_id=chat, sender=sender, body=f"owner {i}")


async def test_serve_and_hub_with_worker_deliver_through_pgbouncer(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    user = uuid4()
    [(chat, sender)] = await make_chats(pool, 1, [user])
    async with pgbouncer(database_url) as bouncer, processes() as procs:
        through = bouncer.url(database_url)
        env = base_env(through, REALTIME_DATABASE_SESSION_URL=database_url)
        owners = await asyncpg.create_pool(through, statement_cache_size=0, min_size=1, max_size=2)
        assert owners is not None
        try:
            # One process: serve.
            serve = hub_proc(env, tmp_path, name="serve", command="serve")
            procs.append(serve)
            await serve.start()
            listener = Listener(user, [serve.ws_url])
            listener.start()
            try:
                await wait_until(listener.connected.is_set, within=30)
                await owner_writes(owners, serve.http_url, chat, sender, 10)
                await wait_until(lambda: len({s for _, s in listener.received}) >= 10, within=60)
            finally:
                await listener.close()
            assert await serve.stop() == 0, serve.log_text()[-3000:]

            # The split deployment: a hub and a worker.
            hub = hub_proc(env, tmp_path)
            procs.append(hub)
            await hub.start()
            worker = Proc(
                ("worker",), {**env, "REALTIME_HUB_URL": hub.http_url}, tmp_path / "worker.log"
            )
            procs.append(worker)
            await worker.start()
            listener = Listener(user, [hub.ws_url])
            listener.start()
            try:
                await wait_until(listener.connected.is_set, within=30)
                await owner_writes(owners, hub.http_url, chat, sender, 10)
                await wait_until(lambda: len({s for _, s in listener.received}) >= 10, within=60)
                seqs = sorted({s for _, s in listener.received})
                assert seqs == list(range(11, 21)), seqs
            finally:
                await listener.close()
            assert await worker.stop() == 0, worker.log_text()[-3000:]
            assert await hub.stop() == 0, hub.log_text()[-3000:]
        finally:
            await owners.close()
        pending = await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status <> 'Done'"
        )
        assert pending == 0
        log = bouncer.log_text()
        # The pools really went through PgBouncer, and it refused nothing they sent.
        assert log.count("login attempt") >= 3, log[-3000:]
        assert "unsupported startup parameter" not in log, log[-3000:]
        for proc in (serve, hub, worker):
            assert "Traceback" not in proc.log_text(), proc.log_text()[-3000:]
