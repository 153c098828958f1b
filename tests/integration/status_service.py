"""A small recording status service on loopback (the media pipeline's ``GET {url}/{id}``), run
by the test: answers are set per recording, requests are counted, and asks can be held."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import asyncpg
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from realtime_dispatch.messenger import calls, recordings
from tests.local_server import serving


class StatusService:
    def __init__(self) -> None:
        self.answers: dict[UUID, list[dict[str, str]]] = {}
        """Per recording, the answers to give in order (the last one repeats)."""
        self.asked: Counter[UUID] = Counter()
        self.hold = False
        """While true, asks wait for :attr:`released` (an ask in flight)."""
        self.held = 0
        self.released = asyncio.Event()

    def answer(self, recording_id: UUID, *statuses: dict[str, str]) -> None:
        self.answers[recording_id] = list(statuses)

    async def status(self, request: Request) -> Response:
        recording_id = UUID(request.path_params["recording_id"])
        self.asked[recording_id] += 1
        if self.hold:
            self.held += 1
            await self.released.wait()
        queue = self.answers.get(recording_id)
        if not queue:
            return Response(b'{"error": "unknown recording"}', status_code=404)
        body = queue.pop(0) if len(queue) > 1 else queue[0]
        return Response(orjson.dumps(body), media_type="application/json")


@contextlib.asynccontextmanager
async def status_service(service: StatusService) -> AsyncIterator[str]:
    """Serve ``service`` on a free loopback port; yields its base URL."""
    app = Starlette(routes=[Route("/status/{recording_id}", service.status)])
    async with serving(app) as url:
        try:
            yield f"{url}/status"
        finally:
            service.released.set()


async def stopped_call_recording(pool: asyncpg.Pool) -> tuple[UUID, UUID, UUID]:
    """A stopped recording of an answered call; returns (recording, caller, callee)."""
    caller, callee = uuid4(), uuid4()
    async with pool.acquire() as conn:
        call = await calls.start_call(conn, caller=caller, callee=callee)
        await calls.answer_call(conn, call_id=call, actor=callee)
        recording = await recordings.start_recording(conn, actor=caller, call_id=call)
        await recordings.stop_recording(conn, recording_id=recording, actor=caller)
    return recording, caller, callee
