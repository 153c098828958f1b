"""Push to a hub in another process over HTTP: ``POST {hub}/api/v1/hubs/messenger/groups/{group}``
with ``{"target", "arguments"}`` and the bearer service key (Azure SignalR REST API shape).

2xx is success. Only a refusal in the hub's own words is permanent (:func:`classify_answer`):
anything else may come from a proxy, an ingress or a wrong URL in front of the hub, and is
retried with backoff (quarantined only after ``max_attempts``).

Pushes to the same group go one after another, in order; different groups go concurrently, up
to ``concurrency`` at once. Under the dispatcher's :data:`PUSH_DEADLINE` each
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
from realtime_dispatch.push import (
    MIN_PUSH_TIME,
    PUSH_DEADLINE,
    NotPushed,
    PublishResult,
    Push,
    hub_problem_code,
)

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
        if status in (401, 403):
            _log.error("hub_push_unauthorized", status=status)
        return classify_answer(status, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


def classify_answer(status: int, body: bytes) -> RealtimeDispatchError | None:
    """What an answer of the push endpoint means for the row (docs/reference.md, "Push
    outcomes"):

    - 2xx: pushed.
    - 4xx other than 401/403/408/429, with the hub's own refusal body
      (:func:`~realtime_dispatch.push.hub_problem`): permanent, the row is quarantined.
    - 401/403 (a wrong key, fixed by an operator), 408, 429, 5xx, and any 4xx without the hub's
      body (404 or 405 of a wrong path, a proxy's or ingress's error page): transient.
    """
    if 200 <= status < 300:
        return None
    code = f"Http{status}"
    if 400 <= status < 500 and status not in (401, 403, 408, 429):
        refusal = hub_problem_code(body)
        if refusal is not None:
            return PushRejected(f"hub refused the push ({refusal})", code=code)
        return HubUnavailable(f"answered {status}, not by the hub (proxy or wrong URL?)", code=code)
    return HubUnavailable(f"hub answered {status}", code=code)
