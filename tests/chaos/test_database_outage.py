"""A worker rides out a database outage quietly: PostgreSQL, seen through a proxy, refuses every
connection for 10 s while owners keep writing (directly). The worker backs off instead of
spinning, logs the outage once when it starts and once when it ends, shows it on its own
``/readyz`` and ``/metrics``, and sends what became due as soon as the database is back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest

from support.procs import free_port, wait_until
from tests.chaos.harness import Proc, base_env, hub_proc, outbox_status, processes, report
from tests.hub_fixtures import SlowPostgresProxy
from tests.integration.support import new_chat, send

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

OUTAGE = 10.0  # seconds the database refuses connections (the fault, not an expectation)


def events(log: str) -> list[str]:
    names = []
    for line in log.splitlines():
        if line.startswith("{"):
            names.append(orjson.loads(line).get("event", ""))
    return names


async def probe(worker: Proc) -> tuple[int, dict[str, object], str]:
    async with httpx.AsyncClient(base_url=worker.http_url, timeout=5) as http:
        ready = await http.get("/readyz")
        metrics = await http.get("/metrics")
    return ready.status_code, ready.json(), metrics.text


def gauge(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


async def test_worker_rides_out_a_database_outage_quietly(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    chat, sender = await new_chat(pool)
    async with SlowPostgresProxy(database_url, delay=0.0) as proxy, processes() as procs:
        env = base_env(database_url, REALTIME_DISPATCH_MAX_ATTEMPTS="1000")
        hub = hub_proc(env, tmp_path)
        procs.append(hub)
        await hub.start()
        worker_env = {
            **env,
            "REALTIME_DATABASE_URL": proxy.url,
            "REALTIME_HUB_URL": hub.http_url,
            # The suite's fast poll would hide a wait that ignores it; production's 1 s is what
            # bounds the reconnect backoff.
            "REALTIME_DISPATCH_POLLING_INTERVAL": "1",
        }
        worker = Proc(("worker",), worker_env, tmp_path / "worker.log", port=free_port())
        procs.append(worker)
        await worker.start()  # returns once /readyz answers 200
        status, body, metrics = await probe(worker)
        assert (status, body["status"]) == (200, "ready"), body
        assert list(body["runners"].values()) == ["active"], body
        assert gauge(metrics, "messenger_realtime_database_available") == 1

        await send(pool, chat, sender, "before")

        async def drained() -> bool:
            return (await outbox_status(pool)).get("Pending", 0) == 0

        await wait_until(drained, within=30)
        before = len(worker.log_text().splitlines())

        await proxy.refuse()
        down_at = time.monotonic()
        written = [await send(pool, chat, sender, f"during {i}") for i in range(5)]

        async def reports_outage() -> bool:
            status, body, metrics = await probe(worker)
            return (
                status == 503
                and body["status"] == "database_unavailable"
                and gauge(metrics, "messenger_realtime_database_available") == 0
            )

        await wait_until(reports_outage, within=30, interval=0.2)
        await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))
        during = worker.log_text().splitlines()[before:]
        await proxy.accept()
        up_at = time.monotonic()
        await wait_until(drained, within=60, interval=0.02)
        recovered_in = time.monotonic() - up_at
        done = await pool.fetchval(
            "SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Done' AND id = ANY($1)",
            [m.outbox_id for m in written],
        )
        assert done == len(written)
        await wait_until(lambda: "database_available" in events(worker.log_text()), within=10)

        outage_events = events("\n".join(during))
        after = events("\n".join(worker.log_text().splitlines()[before:]))
        # One line when the outage starts (plus the lost LISTEN session), none per attempt.
        assert outage_events.count("database_unavailable") == 1, outage_events
        assert "dispatch_pass_failed" not in outage_events, outage_events
        assert len(outage_events) <= 4, outage_events
        assert len(during) == len(outage_events), during  # nothing else either (no tracebacks)
        assert after.count("database_available") == 1, after
        status, body, metrics = await probe(worker)
        assert status == 200, body
        assert gauge(metrics, "messenger_realtime_database_available") == 1
        attempts = [
            orjson.loads(line)["attempts"]
            for line in worker.log_text().splitlines()
            if '"database_available"' in line
        ]
        assert worker.alive
        assert await worker.stop() == 0
        report(
            "database refused for 10 s under a worker",
            outage_seconds=OUTAGE,
            log_lines_during_outage=len(during),
            events_during_outage=outage_events,
            reconnect_attempts=attempts[-1],
            due_rows_out_after_recovery_seconds=round(recovered_in, 3),
        )
