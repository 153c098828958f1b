"""Push to a hub in another process over HTTP: ``POST {hub}/api/v1/hubs/messenger/groups/{group}``
with ``{"target", "arguments"}`` and the bearer service key (Azure SignalR REST API shape).

2xx is success. Connection errors, timeouts, 5xx and 429 are transient (the row is retried);
401/403 also (a wrong key is fixed by an operator, after which the backlog drains); other 4xx
are permanent. Pushes to the same group go one after another, in order; different groups go
concurrently, up to ``concurrency`` at once. Under the dispatcher's :data:`PUSH_DEADLINE` each
push waits at most for the time left (:data:`MIN_PUSH_TIME` at least), and pushes not started by
then are answered :class:`NotPushed`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from urllib.parse import quote

import httpx
import orjson
import structlog

from realtime_dispatch.errors import HubUnavailable, PushRejected, RealtimeDispatchError
from realtime_dispatch.push import MIN_PUSH_TIME, PUSH_DEADLINE, NotPushed, PublishResult, Push

_log = structlog.get_logger(__name__)
PUSH_PATH = "/api/v1/hubs/messenger/groups/{group}"


class HttpHubPublisher:
    def __init__(
        self,
        hub_url: str,
        service_key: str,
        *,
        timeout: float = 5.0,
        concurrency: int = 16,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=hub_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {service_key}",
                "Content-Type": "application/json",
            },
            timeout=timeout,
            transport=transport,
        )
        self._concurrency = concurrency
        self._timeout = timeout

    async def publish(self, pushes: Sequence[Push]) -> Sequence[PublishResult]:
        results: list[PublishResult] = [None] * len(pushes)
        by_group: dict[str, list[int]] = {}
        for index, push in enumerate(pushes):
            by_group.setdefault(push.group, []).append(index)
        gate = asyncio.Semaphore(self._concurrency)
        deadline = PUSH_DEADLINE.get()

        async def send_group(indexes: list[int]) -> None:
            async with gate:
                for index in indexes:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        results[index] = NotPushed("the pass ran out of time")
                    else:
                        results[index] = await self._send(pushes[index], left)

        async with asyncio.TaskGroup() as tg:
            for indexes in by_group.values():
                tg.create_task(send_group(indexes))
        return results

    async def _send(self, push: Push, left: float | None) -> RealtimeDispatchError | None:
        # The payload's JSON goes in as encoded (no decode and re-encode of the payload).
        body = b"".join(
            (b'{"target":', orjson.dumps(push.target), b',"arguments":[', push.payload_json, b"]}")
        )
        timeout = self._timeout if left is None else min(self._timeout, max(left, MIN_PUSH_TIME))
        try:
            response = await self._client.post(
                PUSH_PATH.format(group=quote(push.group, safe=":")), content=body, timeout=timeout
            )
        except httpx.TimeoutException:
            return HubUnavailable("push timed out", code="Timeout")
        except httpx.TransportError as exc:
            return HubUnavailable(type(exc).__name__, code="Unreachable")
        status = response.status_code
        if 200 <= status < 300:
            return None
        if status >= 500 or status in (401, 403, 408, 429):
            if status in (401, 403):
                _log.error("hub_push_unauthorized", status=status)
            return HubUnavailable(f"hub answered {status}", code=f"Http{status}")
        return PushRejected(f"hub answered {status}", code=f"Http{status}")

    async def aclose(self) -> None:
        await self._client.aclose()
