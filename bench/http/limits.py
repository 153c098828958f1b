"""What the limits against hostile clients cost the hub's HTTP path, one command:

    python -m bench.http.limits [--requests 4000] [--concurrency 8] [--runs 5]

Starts the real hub (``run_hub`` under uvloop, as ``bench/hub/fanout.py hub`` runs it) and
measures the server's CPU µs per request for four requests, each on keep-alive connections,
``--concurrency`` in flight: ``GET /healthz`` (the HTTP protocol alone: header timer armed and
cancelled per request), ``POST`` to the push endpoint (``user:`` group with no member: the
request guard's service-key check and bounded body read, no barrier), and ``POST`` negotiate
without a body as SignalR clients send it (the per-user admission, the bounded store), and
with a 2-byte body (the request guard verifies the token before the route does it again).
Prints the median of ``--runs`` runs with their range. To compare with a version without the
limits, run it with that version's ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import uuid
from typing import Any

import httpx

from bench._common import module_command, parse_with_smoke
from bench.hub.fanout import SECRET, SERVICE_KEY, drop_database, prepare_database, wait_http
from support.hub_wire import make_token
from support.procs import cpu_seconds, free_port


async def _run(
    http: httpx.AsyncClient, pid: int, requests: int, concurrency: int, request: Any
) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(requests):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            response = await request(http)
            assert response.status_code < 300, response.text

    before = cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (cpu_seconds(pid) - before) / requests * 1e6


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    bench_dsn, _ = await prepare_database(dsn, 1)
    port = free_port()
    hub = await asyncio.create_subprocess_exec(
        *module_command("bench.hub.fanout"), "hub", "--port", str(port), "--dsn", bench_dsn
    )
    push_body = {"target": "message_received", "arguments": [{"chatId": "c", "seq": 0}]}
    service = {"Authorization": f"Bearer {SERVICE_KEY}"}
    group = f"/api/v1/hubs/messenger/groups/user:{uuid.uuid4()}"
    users = [str(uuid.uuid4()) for _ in range(args.concurrency * 4)]
    tokens = [make_token(u, ttl=3600, secret=SECRET) for u in users]
    turn = iter(range(10**9))

    def negotiate(body: bytes) -> Any:
        def request(http: httpx.AsyncClient) -> Any:
            token = tokens[next(turn) % len(tokens)]
            return http.post(
                "/hubs/messenger/negotiate?negotiateVersion=1",
                headers={"Authorization": f"Bearer {token}"},
                content=body,
            )

        return request

    kinds = {
        "healthz": lambda http: http.get("/healthz"),
        "push": lambda http: http.post(group, json=push_body, headers=service),
        "negotiate": negotiate(b""),  # as SignalR clients send it
        "negotiate-with-body": negotiate(b"{}"),  # the guard verifies the token too
    }
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        await wait_http(port)
        limits = httpx.Limits(max_connections=args.concurrency)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits) as http:
            for request in kinds.values():  # warm-up
                await _run(http, hub.pid, 200, args.concurrency, request)
            for _ in range(args.runs):
                for kind, request in kinds.items():
                    cost = await _run(http, hub.pid, args.requests, args.concurrency, request)
                    results[kind].append(cost)
    finally:
        hub.terminate()
        await hub.wait()
        await drop_database(dsn, bench_dsn)
    summary = {
        kind: {
            "cpu_us_per_request": round(statistics.median(values), 1),
            "range": [round(min(values), 1), round(max(values), 1)],
        }
        for kind, values in results.items()
    }
    return {"requests": args.requests, "concurrency": args.concurrency, "results": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parse_with_smoke(parser, {"requests": 200, "runs": 1})
    print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
