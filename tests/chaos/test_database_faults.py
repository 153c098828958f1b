"""Point 2: database faults under load. Owners write and two workers drain through a hub
process while the dispatcher's and hub's connections are terminated (pool, LISTEN, lock),
statements time out, and a private PostgreSQL server is restarted. The processes recover by
themselves; nothing is lost; the single-runner lock never has two holders (sampled every
10 ms all run long)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import asyncpg
import pytest

from realtime_dispatch.cli.embedded_postgres import EmbeddedPostgres
from realtime_dispatch.messenger.schema import migrate
from support.procs import wait_until
from tests.chaos.harness import delivery_figures, report, scale
from tests.chaos.pipeline import Pipeline, run_pipeline, time_to_progress, tolerant_status

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

FAULTS = scale("REALTIME_CHAOS_FAULTS", 3)
MESSAGES = scale("REALTIME_CHAOS_FAULT_MESSAGES", 400)
RATE = scale("REALTIME_CHAOS_RATE", 150)

# These scenarios measure recovery, not the retry budget. With this suite's compressed backoff
# (cap 1 s) 8 attempts span about 6 s, against about 4 minutes with production's (2 s, cap 120 s),
# and attempts add up over repeated outages; and the hub refuses pushes for up to its membership
# health interval after its LISTEN connection dies (docs/RELIABILITY.md, "Findings"). Quarantine
# after max_attempts is tested on its own in test_hub_faults.py.
RETRY_BUDGET = {"REALTIME_DISPATCH_MAX_ATTEMPTS": "1000"}

TERMINATE_SQL = """
SELECT coalesce(array_agg(application_name ORDER BY application_name), '{}')
FROM (SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = current_database() AND application_name LIKE 'realtime-dispatch%'
        AND pid <> pg_backend_pid()) AS killed
"""


def failure_lines(pipeline: Pipeline) -> int:
    """The workers' log lines for failed passes: a statement timeout (SQLSTATE 57014, operator
    intervention) counts as the database being unavailable, logged once per outage."""
    return sum(
        w.log_text().count(f'"event": "{event}"')
        for w in pipeline.workers
        for event in ("dispatch_pass_failed", "database_unavailable")
    )


def in_outage(pipeline: Pipeline) -> bool:
    """Some worker's last database state line says the database is unavailable."""
    for worker in pipeline.workers:
        text = worker.log_text()
        down = text.rfind('"event": "database_unavailable"')
        if down > text.rfind('"event": "database_available"'):
            return True
    return False


async def spaced(pipeline: Pipeline, index: int, total: int) -> None:
    """Wait until the owners are ``index+1``/``total+1`` of the way through."""
    threshold = MESSAGES * (index + 1) // (total + 1)
    await wait_until(lambda: pipeline.sent[0] >= threshold, within=300)


async def test_terminated_connections_recover_by_themselves(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    async def inject(pipeline: Pipeline) -> dict[str, object]:
        killed_names: set[str] = set()
        recovery = []
        killed_total = 0
        for i in range(FAULTS):
            await spaced(pipeline, i, FAULTS)
            at = time.monotonic()
            names = await pool.fetchval(TERMINATE_SQL)
            killed_total += len(names)
            killed_names.update(names)
            recovery.append(await time_to_progress(pool, at))
        return {"killed": killed_total, "names": sorted(killed_names), "recovery": recovery}

    pipeline, injected, status, totals = await run_pipeline(
        pool,
        database_url,
        tmp_path,
        inject,
        messages=MESSAGES,
        rate=RATE,
        workers=2,
        env_extra=RETRY_BUDGET,
    )
    assert status == {"Done": MESSAGES}, status
    # Every kind of connection was hit: the dispatcher's pool and LISTEN connection
    # ("realtime-dispatch"), its lock connection, and the hub's membership feed.
    assert {"realtime-dispatch", "realtime-dispatch-lock"} <= set(injected["names"])
    lost_logs = sum(w.log_text().count("dispatcher_connection_lost") for w in pipeline.workers)
    report(
        "pg_terminate_backend (pool, LISTEN, lock, hub feed), 2 workers",
        faults=FAULTS,
        backends_killed=injected["killed"],
        application_names=injected["names"],
        messages=MESSAGES,
        **delivery_figures(totals),
        recovery_seconds=injected["recovery"],
        max_lock_holders=pipeline.max_lock_holders,
        lock_samples=pipeline.lock_samples,
        connection_lost_log_lines=lost_logs,
        hub_push_http_500=pipeline.hubs[0].log_text().count("Exception in ASGI application"),
        hub_push_refused_membership_unavailable=pipeline.hubs[0]
        .log_text()
        .count('"MembershipUnavailable"'),
        outbox=status,
    )


async def test_statement_timeouts_then_recovery(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    """Every new session of the database gets ``statement_timeout = 1ms`` and the dispatcher's
    sessions are terminated so that they reconnect into it; later the setting is lifted."""
    database = await pool.fetchval("SELECT current_database()")

    async def inject(pipeline: Pipeline) -> dict[str, object]:
        recovery = []
        failed_passes = 0
        # Opened before the fault, so its own session keeps the normal setting.
        admin = await asyncpg.connect(database_url)
        try:
            for i in range(FAULTS):
                await spaced(pipeline, i, FAULTS)
                before = failure_lines(pipeline)
                await admin.execute(f'ALTER DATABASE "{database}" SET statement_timeout = 1')
                await admin.fetchval(TERMINATE_SQL)

                def failing(before: int = before) -> bool:
                    # A new failure line, or an outage the worker has not left since an earlier
                    # fault (it logs the outage once, not once per fault).
                    return failure_lines(pipeline) > before or in_outage(pipeline)

                await wait_until(failing, within=30)
                failed_passes += failure_lines(pipeline) - before
                at = time.monotonic()
                await admin.execute(f'ALTER DATABASE "{database}" RESET statement_timeout')
                await admin.fetchval(TERMINATE_SQL)
                # The owners' pool may have opened sessions inside the window: renew them.
                await pool.expire_connections()
                recovery.append(await time_to_progress(pool, at))
        finally:
            await admin.close()
        return {"failed_passes": failed_passes, "recovery": recovery}

    _pipeline, injected, status, totals = await run_pipeline(
        pool, database_url, tmp_path, inject, messages=MESSAGES, rate=RATE, env_extra=RETRY_BUDGET
    )
    assert status == {"Done": MESSAGES}, status
    report(
        "statement_timeout=1ms on every dispatcher session, then lifted",
        faults=FAULTS,
        failed_passes_logged=injected["failed_passes"],
        messages=MESSAGES,
        **delivery_figures(totals),
        recovery_seconds_after_lift=injected["recovery"],
        outbox=status,
    )


async def test_postgresql_restarted_while_owners_write_and_worker_drains(
    tmp_path: Path,
) -> None:
    server = EmbeddedPostgres(tmp_path / "pg")
    dsn = server.start()
    try:
        conn = await asyncpg.connect(dsn)
        await migrate(conn)
        await conn.close()
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=8)
        assert pool is not None
        try:

            async def inject(pipeline: Pipeline) -> dict[str, object]:
                recovery = []
                in_flight = []
                for i in range(FAULTS):
                    await spaced(pipeline, i, FAULTS)
                    in_flight.append((await tolerant_status(pool)).get("Pending", 0))
                    at = time.monotonic()
                    await asyncio.to_thread(server.restart)
                    recovery.append(await time_to_progress(pool, at))
                return {"in_flight": in_flight, "recovery": recovery}

            pipeline, injected, status, totals = await run_pipeline(
                pool, dsn, tmp_path, inject, messages=MESSAGES, rate=RATE, env_extra=RETRY_BUDGET
            )
            # An owner whose COMMIT was cut by the restart cannot know whether it landed; the
            # test's owners retry, so a message may exist twice (two seqs, two rows): the
            # outbox must match the messages table, not the number of attempts.
            committed = int(await pool.fetchval("SELECT count(*) FROM messenger.messages"))
        finally:
            pool.terminate()
    finally:
        server.stop()
        shutil.rmtree(tmp_path / "pg", ignore_errors=True)
    assert status == {"Done": committed}, (status, committed)
    report(
        "PostgreSQL restarted (owners writing, worker draining)",
        faults=FAULTS,
        messages=MESSAGES,
        in_flight_at_restart=injected["in_flight"],
        owner_commits_with_unknown_outcome_retried=committed - MESSAGES,
        **delivery_figures(totals),
        recovery_seconds=injected["recovery"],
        max_lock_holders=pipeline.max_lock_holders,
        outbox=status,
    )
