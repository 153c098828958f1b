"""Point 4: two and three workers racing for one outbox through a hub process, then the runner
holding the single-runner lock is killed (-9) again and again.

* Without kills, every row is claimed exactly once (``attempts == 1`` when it ends Done) and no
  client sees a repeated push: SKIP LOCKED plus the claim's lease (``next_attempt_at``, the
  backoff) keep racers on disjoint rows.
* After the lock holder dies, another worker makes progress within one polling interval plus one
  pass (``max_run_duration``). The holder is traced through its TCP client port; on a unix
  socket (the embedded server) a worker is killed in turn instead, holder or not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import asyncpg
import pytest

from support.procs import wait_until
from tests.chaos.harness import Proc, delivery_figures, report, scale
from tests.chaos.pipeline import Pipeline, run_pipeline, time_to_progress

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

MESSAGES = scale("REALTIME_CHAOS_FAILOVER_MESSAGES", 600)
FAULTS = scale("REALTIME_CHAOS_FAULTS", 3)
RATE = scale("REALTIME_CHAOS_RATE", 150)
POLL = 0.2
MAX_RUN = 2.0
# The default lease (backoff base 2 s) so that a slow outcome write is not overtaken by a
# legitimate re-claim.
ENV = {
    "REALTIME_DISPATCH_BACKOFF_BASE": "2",
    "REALTIME_DISPATCH_BACKOFF_CAP": "10",
    "REALTIME_DISPATCH_MAX_RUN_DURATION": str(MAX_RUN),
    "REALTIME_DISPATCH_POLLING_INTERVAL": str(POLL),
}

HOLDER_PORT_SQL = """
SELECT a.client_port FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint)
      = hashtextextended('job:scheduled:messenger-realtime-dispatch', 0)
"""


def socket_inodes(port: int) -> set[str]:
    """Inodes of local TCP sockets bound to 127.0.0.1:``port`` (the client side)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def owner_of(port: int, workers: list[Proc]) -> Proc | None:
    inodes = socket_inodes(port)
    for worker in workers:
        if not worker.alive or worker.process is None:
            continue
        fd_dir = Path(f"/proc/{worker.process.pid}/fd")
        try:
            links = {os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)}
        except OSError:
            continue
        if any(f"socket:[{inode}]" in links for inode in inodes):
            return worker
    return None


async def lock_holder(pool: asyncpg.Pool, workers: list[Proc]) -> Proc | None:
    port = await pool.fetchval(HOLDER_PORT_SQL)
    return owner_of(port, workers) if port else None


async def run_failover(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path, workers: int, kills: int
) -> None:
    over_tcp = (
        await pool.fetchval("SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()")
        or -1
    ) > 0

    async def inject(pipeline: Pipeline) -> dict[str, object]:
        stalls = []
        identified = 0
        for i in range(kills):
            threshold = MESSAGES * (i + 1) // (kills + 1)
            await wait_until(lambda t=threshold: pipeline.sent[0] >= t, within=300)
            if over_tcp:
                holder: list[Proc | None] = [None]

                async def held(holder: list[Proc | None] = holder) -> bool:
                    holder[0] = await lock_holder(pool, pipeline.workers)
                    return holder[0] is not None

                await wait_until(held, within=30, interval=0.005)
                victim = holder[0]
                identified += 1
            else:  # a unix socket (embedded server): no client port to trace the holder by
                victim = pipeline.workers[i % len(pipeline.workers)]
            assert victim is not None
            at = time.monotonic()
            await victim.kill()
            stalls.append(await time_to_progress(pool, at))
            await victim.start()
        return {"stalls": stalls, "holder_identified": identified}

    _pipeline, injected, status, totals = await run_pipeline(
        pool,
        database_url,
        tmp_path,
        inject,
        messages=MESSAGES,
        rate=RATE,
        workers=workers,
        env_extra=ENV,
    )
    assert status == {"Done": MESSAGES}, status
    stalls = injected["stalls"]
    assert all(stall <= POLL + MAX_RUN for stall in stalls), stalls
    claimed_twice = int(
        await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox WHERE attempts > 1")
    )
    if kills == 0:
        assert claimed_twice == 0
        assert totals["repeated_pushes"] == 0
    report(
        f"{workers} workers racing" + (f", lock holder kill -9 x{kills}" if kills else ""),
        workers=workers,
        faults=kills,
        messages=MESSAGES,
        rows_claimed_more_than_once=claimed_twice,
        **delivery_figures(totals),
        seconds_to_progress_after_holder_death=stalls,
        kills_of_the_identified_lock_holder=injected["holder_identified"],
        bound_seconds=POLL + MAX_RUN,
        outbox=status,
    )


@pytest.mark.parametrize("workers", [2, 3])
async def test_workers_racing_claim_each_row_once(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path, workers: int
) -> None:
    await run_failover(pool, database_url, tmp_path, workers, kills=0)


async def test_lock_holder_killed_another_runner_takes_over(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    await run_failover(pool, database_url, tmp_path, 3, kills=FAULTS)
