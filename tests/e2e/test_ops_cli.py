"""``quarantined``, ``lock`` and ``stats --watch`` through the real command."""

import asyncio
import signal
from datetime import UTC, datetime

import asyncpg
import orjson
from rich.console import Console

from realtime_dispatch.cli.ops import render_watch
from realtime_dispatch.ops.service import LockHolder, OpsService
from support.procs import cli_env, run_cli, start_cli, stop
from tests.errors_support import quarantine_rows

LOCK_SQL = (
    "SELECT pg_advisory_lock(hashtextextended('job:scheduled:messenger-realtime-dispatch', 0))"
)


async def test_quarantined_lists_rows_with_errors(pool: asyncpg.Pool, database_url: str) -> None:
    contact = await quarantine_rows(pool, 2, kind="ContactRemoved")
    call = await quarantine_rows(pool, 1, kind="CallInvited")
    env = cli_env(REALTIME_DATABASE_URL=database_url)
    listed = orjson.loads(run_cli("quarantined", "--json", env=env).stdout)
    assert [row["id"] for row in listed] == [str(i) for i in sorted(contact + call, reverse=True)]
    assert listed[0]["lastError"] == "HubUnavailable:Unreachable: no outcome after 8 attempts"
    one_kind = orjson.loads(
        run_cli("quarantined", "--kind", "CallInvited", "--json", env=env).stdout
    )
    assert [row["id"] for row in one_kind] == [str(call[0])]
    human = run_cli("quarantined", env=env)
    assert human.returncode == 0
    assert str(call[0]) in human.stdout
    assert "HubUnavailable:Unreachable" in human.stdout
    await pool.execute("DELETE FROM messenger.realtime_outbox")
    assert run_cli("quarantined", env=env).stdout.strip() == "no quarantined rows"


async def test_revoke_lists_and_lifts(pool: asyncpg.Pool, database_url: str) -> None:
    env = cli_env(REALTIME_DATABASE_URL=database_url)
    user = "7d4cbd55-5c0e-4a43-9f34-0f4b2b3b4f10"
    revoked = run_cli("revoke", "--user", user, env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"revoked {user}: tokens issued before ")
    [listed] = orjson.loads(run_cli("revoke", "--list", "--json", env=env).stdout)
    stored = await pool.fetchval("SELECT revoked_at FROM messenger.realtime_revocations")
    assert listed == {"userId": user, "revokedAt": stored.isoformat()}
    assert run_cli("revoke", "--lift", user, env=env).stdout.strip() == (
        f"lifted the revocation of {user}"
    )
    again = run_cli("revoke", "--lift", user, env=env)
    assert again.returncode == 1
    assert again.stderr.strip() == f"realtime-dispatch: no revocation for user {user}"


async def test_lock_shows_the_holder(database_url: str) -> None:
    env = cli_env(REALTIME_DATABASE_URL=database_url)
    assert run_cli("lock", "--json", env=env).stdout.strip() == "null"
    holder = await asyncpg.connect(database_url, server_settings={"application_name": "maint"})
    try:
        await holder.execute(LOCK_SQL)
        shown = orjson.loads(run_cli("lock", "--json", env=env).stdout)
        assert shown["applicationName"] == "maint"
        assert shown["pid"] == await holder.fetchval("SELECT pg_backend_pid()")
        assert "held by pid" in run_cli("lock", env=env).stdout
    finally:
        await holder.close()


async def test_stats_watch_streams_until_interrupted(pool: asyncpg.Pool, database_url: str) -> None:
    await quarantine_rows(pool, 2, kind="ContactRemoved")
    proc = await start_cli("stats", "--watch", env=cli_env(REALTIME_DATABASE_URL=database_url))
    assert proc.stdout is not None
    first = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
    assert (first["quarantined"], first["pending"]) == (2, 0)
    await quarantine_rows(pool, 1, kind="ContactRemoved")
    second = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
    assert second["quarantined"] == 3
    assert second["at"] > first["at"]
    assert await stop(proc, signal.SIGINT) == 0


async def test_watch_screen_renders_figures(pool: asyncpg.Pool) -> None:
    await quarantine_rows(pool, 4, kind="ContactRemoved")
    service = OpsService(pool)
    screen = render_watch(await service.stats(), await service.recent_lag(), None)
    console = Console(record=True, width=120)
    console.print(screen)
    text = console.export_text()
    assert "quarantined" in text
    assert " 4 " in text
    assert "lock: free" in text
    holder = LockHolder(1, "realtime-dispatch-lock", None, datetime.now(UTC), None)
    console = Console(record=True, width=120)
    console.print(render_watch(await service.stats(), await service.recent_lag(), holder))
    assert "lock: pid 1 (realtime-dispatch-lock)" in console.export_text()
