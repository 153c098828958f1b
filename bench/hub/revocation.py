"""How long a revocation takes to cut a user off on every replica, one command:

    python -m bench.hub.revocation [--connections 200] [--runs 5]

Two hubs on one scratch database (in this process, each served by uvicorn on its own port, as in
``tests/integration/test_hub_auth.py``); ``--connections`` WebSockets of one user, half on each.
Each run revokes the user (the ``revoke`` command's SQL), and times, from just before that
statement, the arrival of the close message ``token revoked`` at every connection; then lifts
the revocation and connects everyone again with a fresh token. Prints the median and the worst
time until the last connection was closed, over ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import orjson
from starlette.applications import Starlette
from websockets.asyncio.client import connect

from bench._common import DEFAULT_DSN, parse_with_smoke, scratch_database
from realtime_dispatch.auth import revocation_store
from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.hub import Hub, HubOptions, hub_routes
from realtime_dispatch.hub.serving.server import HubServer, uvicorn_config
from realtime_dispatch.telemetry.logs import configure_logging
from support.hub_wire import RS
from support.procs import free_port

SECRET = "bench-revocation-secret-of-32-bytes-or-more"


@contextlib.asynccontextmanager
async def replica(dsn: str) -> AsyncIterator[int]:
    async with Hub(HubOptions(jwt_secret=SECRET), pool=None, dsn=dsn) as hub:
        port = free_port()
        config = uvicorn_config(
            Starlette(routes=hub_routes(hub)),
            host="127.0.0.1",
            port=port,
            log_level="error",
            hub=hub,
        )
        server = HubServer(config, hub, install_signal_handlers=False)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()  # raise what stopped it
            await asyncio.sleep(0.01)
        await hub.wait_ready()
        try:
            yield port
        finally:
            server.should_exit = True
            await task


async def client(port: int, token: str, ready: asyncio.Event, t0: list[float]) -> float:
    url = f"ws://127.0.0.1:{port}/hubs/messenger"
    headers = {"Authorization": f"Bearer {token}"}
    async with connect(url, additional_headers=headers, ping_interval=None) as ws:
        await ws.send(orjson.dumps({"protocol": "json", "version": 1}).decode() + RS)
        assert await ws.recv() == "{}" + RS
        ready.set()
        async for data in ws:
            text = data if isinstance(data, str) else data.decode()
            for record in filter(None, text.split(RS)):
                if orjson.loads(record).get("type") == 7:
                    return time.perf_counter() - t0[0]
    raise AssertionError("closed without a close message")


async def main(args: argparse.Namespace) -> dict[str, object]:
    configure_logging("warning")
    async with (
        scratch_database(args.dsn, "revocation") as dsn,
        replica(dsn) as first,
        replica(dsn) as second,
    ):
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        user = uuid.uuid4()
        worst: list[float] = []
        try:
            for _ in range(args.runs):
                token = mint_token(SECRET, user)
                t0 = [0.0]
                readies = [asyncio.Event() for _ in range(args.connections)]
                tasks = [
                    asyncio.create_task(client((first, second)[n % 2], token, readies[n], t0))
                    for n in range(args.connections)
                ]
                for ready in readies:
                    await ready.wait()
                await asyncio.sleep(1.1)  # the revocation must come after the token's iat
                t0[0] = time.perf_counter()
                await revocation_store.revoke(pool, user)
                closed = await asyncio.gather(*tasks)
                worst.append(max(closed))
                await revocation_store.lift(pool, user)
        finally:
            await pool.close()
    return {
        "connections": args.connections,
        "replicas": 2,
        "runs": args.runs,
        "last_closed_ms_median": round(statistics.median(worst) * 1000, 1),
        "last_closed_ms_max": round(max(worst) * 1000, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parse_with_smoke(parser, {"connections": 10, "runs": 1})
    print(json.dumps(asyncio.run(main(args)), indent=2))
