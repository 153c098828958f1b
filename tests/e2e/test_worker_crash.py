"""Persist-then-push: the worker process is killed (-9) between the owner's commit and the push;
the row survives and is delivered after a restart."""

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import asyncpg
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from support.procs import cli_env, start_cli, stop
from tests.integration.support import new_chat, row, send, wait_done
from tests.local_server import serving


class PushTarget:
    """A stand-in for the hub's HTTP push endpoint: records pushes, can hang them."""

    def __init__(self) -> None:
        self.received: list[dict[str, object]] = []
        self.hang = True
        self.hung = asyncio.Event()
        self.released = asyncio.Event()

    async def push(self, request: Request) -> Response:
        if request.headers.get("authorization") != "Bearer svc-key":
            return Response(status_code=401)
        if self.hang:
            self.hung.set()
            await self.released.wait()  # until the test ends; its caller is long dead
            return Response(status_code=503)
        body = orjson.loads(await request.body())
        self.received.append({"group": request.path_params["group"], **body})
        return Response(status_code=202)


@contextlib.asynccontextmanager
async def serve_target(target: PushTarget) -> AsyncIterator[str]:
    app = Starlette(
        routes=[Route("/api/v1/hubs/messenger/groups/{group}", target.push, methods=["POST"])]
    )
    async with serving(app) as url:
        try:
            yield url
        finally:
            target.released.set()


def worker_env(database_url: str, hub_url: str, **values: str) -> dict[str, str]:
    """A worker's environment: quick backoffs, pushing to ``hub_url`` with a service key."""
    return cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_URL=hub_url,
        REALTIME_HUB_SERVICE_KEY="svc-key",
        REALTIME_DISPATCH_BACKOFF_BASE="0.3",
        REALTIME_DISPATCH_BACKOFF_CAP="1",
        **values,
    )


async def test_kill_between_commit_and_push_then_restart_delivers(
    pool: asyncpg.Pool, database_url: str
) -> None:
    target = PushTarget()
    chat, sender = await new_chat(pool)
    async with serve_target(target) as url:
        env = worker_env(
            database_url,
            url,
            REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
        )
        worker = await start_cli("worker", env=env)
        try:
            sent = await send(pool, chat, sender, "survives")
            await asyncio.wait_for(target.hung.wait(), 30)  # claimed and mid-push
            worker.kill()  # SIGKILL: no outcome is written
            await worker.wait()
        finally:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
        r = await row(pool, sent.outbox_id)
        assert (r["status"], r["attempts"]) == ("Pending", 1)

        target.hang = False
        worker = await start_cli("worker", env=env)
        try:
            await wait_done(pool, sent.outbox_id)
        finally:
            assert await stop(worker, signal.SIGTERM) == 0
    [push] = target.received
    assert push["group"] == f"chat:{chat}"
    assert push["target"] == "message_received"
    [payload] = push["arguments"]  # type: ignore[misc]
    assert payload["messageId"] == str(sent.message_id)
    assert payload["body"] == "survives"
    assert (await row(pool, sent.outbox_id))["attempts"] == 2


async def test_a_frozen_worker_loses_the_lock_and_another_delivers(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """SIGSTOP mid-pass: the process is alive and its sockets stay open (the kernel answers
    keepalives for it), but its event loop runs nothing. The server ends its idle lock session
    after the lease, and a second worker delivers."""
    target = PushTarget()
    chat, sender = await new_chat(pool)
    lock_ttl, polling = 3.0, 0.2
    async with serve_target(target) as url:
        env = worker_env(
            database_url,
            url,
            REALTIME_DISPATCH_POLLING_INTERVAL=str(polling),
            REALTIME_DISPATCH_MAX_RUN_DURATION="2",
            REALTIME_DISPATCH_LOCK_TTL=str(lock_ttl),
        )
        frozen = await start_cli("worker", env=env)
        second: asyncio.subprocess.Process | None = None
        try:
            sent = await send(pool, chat, sender, "taken over")
            await asyncio.wait_for(target.hung.wait(), 30)  # claimed, mid-push, lock held
            frozen.send_signal(signal.SIGSTOP)
            stopped = asyncio.get_running_loop().time()
            target.hang = False
            second = await start_cli("worker", env=env)

            await wait_done(pool, sent.outbox_id)
            took = asyncio.get_running_loop().time() - stopped
            # lock_ttl + polling, plus the second worker's start-up and the row's backoff
            assert took < lock_ttl + polling + 5, took
            assert frozen.returncode is None  # still alive, still stopped
        finally:
            frozen.send_signal(signal.SIGCONT)
            frozen.kill()
            await frozen.wait()
            if second is not None:
                assert await stop(second, signal.SIGTERM) == 0
    assert [p["group"] for p in target.received] == [f"chat:{chat}"]
