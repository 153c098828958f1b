"""Push to a hub in another process over HTTP, with the bearer service key.

A dispatcher batch goes in one request, ``POST {hub}/api/v1/hubs/messenger/batch`` with
``{"pushes": [{"group", "target", "arguments"}, ...]}`` (split only past the hub's limits of
:data:`MAX_BATCH_PUSHES` pushes or :data:`MAX_BATCH_BYTES` bytes, the parts sent in order); the
hub answers one status per push. A hub that does not know the batch form (an older version:
404 or 405) is pushed to one push at a time for :data:`LEGACY_FOR` seconds, then asked again:
``POST {hub}/api/v1/hubs/messenger/groups/{group}`` with ``{"target", "arguments"}`` (Azure
SignalR REST API shape). Pushes to the same group then go one after another, in order;
different groups go concurrently, up to ``concurrency`` at once.

What an answer means (docs/reference.md, "Push outcomes"): 2xx is success. Only a refusal in
the hub's own words is permanent: a 4xx answer with the hub's refusal body
(:func:`classify_answer`), or a 4xx status of one push inside the hub's answer to a batch.
Anything else may come from a proxy, an ingress or a wrong URL in front of the hub (a 404 or
405 of a wrong path, an error page, 5xx), as may connection errors and timeouts: retried with
backoff, quarantined only after ``max_attempts``. 401/403 are transient too (a wrong key is
fixed by an operator, after which the backlog drains).
Under the dispatcher's ``deadline`` (an argument of :meth:`HttpHubPublisher.publish`) each
request waits at most for the time left (:data:`MIN_PUSH_TIME` at least), and pushes not sent
by then are answered :class:`NotPushed`. The batch body carries the ``marks`` it is given.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator, Sequence
from urllib.parse import quote

import httpx
import orjson
import structlog

from realtime_dispatch.delivery.push import (
    BATCH_PATH,
    MAX_BATCH_BYTES,
    MAX_BATCH_PUSHES,
    MIN_PUSH_TIME,
    PUSH_PATH,
    NotPushed,
    PublishResult,
    Push,
    hub_problem_code,
)
from realtime_dispatch.dispatch.http_post import PostTransport
from realtime_dispatch.errors import HubUnavailable, PushRejected, RealtimeDispatchError

_log = structlog.get_logger(__name__)
LEGACY_FOR = 60.0
"""Seconds a hub without the batch form is pushed to one push at a time before it is asked again."""
_BATCH_HEAD, _BATCH_TAIL = b'{"pushes":[', b"]}"


class HttpHubPublisher:
    def __init__(
        self,
        hub_url: str,
        service_key: str,
        *,
        timeout: float = 5.0,
        concurrency: int = 16,
        batch: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``batch=False`` always uses the one-push form (what an older worker does). The
        requests go through :class:`~.http_post.PostTransport` unless a ``transport`` is given
        or a proxy is configured in the environment (then httpx's own, which honours it)."""
        if transport is None and not urllib.request.getproxies():
            transport = PostTransport()
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
        self._batch = batch
        self._legacy_until = 0.0

    async def publish(
        self,
        pushes: Sequence[Push],
        *,
        deadline: float | None = None,
        marks: Sequence[str] = (),
    ) -> Sequence[PublishResult]:
        """One batch request (or a few, past the hub's limits) with ``marks`` in its body; one
        request per push to an older hub. Nothing starts after ``deadline``."""
        if not pushes:
            return []
        if not self._batch or time.monotonic() < self._legacy_until:
            return await self._publish_one_by_one(pushes, deadline)
        results: list[PublishResult] = [None] * len(pushes)
        for start, end, body in _batches(pushes, marks):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                results[start:] = [NotPushed("the pass ran out of time")] * (len(pushes) - start)
                break
            answered = await self._send_batch(body, end - start, left)
            if answered is None:  # an older hub: the rest goes one push at a time
                self._legacy_until = time.monotonic() + LEGACY_FOR
                _log.warning("hub_push_batch_unsupported", retry_in=LEGACY_FOR)
                results[start:] = await self._publish_one_by_one(pushes[start:], deadline)
                break
            results[start:end] = answered
        return results

    async def _send_batch(
        self, body: bytes, count: int, left: float | None
    ) -> list[PublishResult] | None:
        """One request for ``count`` pushes: their results, or None if the hub has no batch form."""
        try:
            response = await self._client.post(BATCH_PATH, content=body, timeout=self._within(left))
        except httpx.TimeoutException:
            return [HubUnavailable("push timed out", code="Timeout")] * count
        except httpx.TransportError as exc:
            return [HubUnavailable(type(exc).__name__, code="Unreachable")] * count
        status = response.status_code
        if status in (404, 405):
            return None
        if not 200 <= status < 300:
            return [_answer_outcome(status, response.content)] * count
        try:
            answers = orjson.loads(response.content)["results"]
            items = [(int(answer["status"]), answer.get("code")) for answer in answers]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            items = []
        if len(items) != count:
            _log.error("hub_push_batch_answer_invalid", status=status)
            return [HubUnavailable("hub answered the batch wrongly", code="BadAnswer")] * count
        # The batch answer is the hub's own: a 4xx in it is the hub refusing that push.
        return [_outcome(s, code if isinstance(code, str) else f"Http{s}") for s, code in items]

    async def _publish_one_by_one(
        self, pushes: Sequence[Push], deadline: float | None
    ) -> list[PublishResult]:
        results: list[PublishResult] = [None] * len(pushes)
        by_group: dict[str, list[int]] = {}
        for index, push in enumerate(pushes):
            by_group.setdefault(push.group, []).append(index)
        gate = asyncio.Semaphore(self._concurrency)

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

    def _within(self, left: float | None) -> float:
        return self._timeout if left is None else min(self._timeout, max(left, MIN_PUSH_TIME))

    async def _send(self, push: Push, left: float | None) -> RealtimeDispatchError | None:
        # The payload's JSON goes in as encoded (no decode and re-encode of the payload).
        body = b"".join(
            (b'{"target":', orjson.dumps(push.target), b',"arguments":[', push.payload_json, b"]}")
        )
        try:
            response = await self._client.post(
                PUSH_PATH.format(group=quote(push.group, safe=":")),
                content=body,
                timeout=self._within(left),
            )
        except httpx.TimeoutException:
            return HubUnavailable("push timed out", code="Timeout")
        except httpx.TransportError as exc:
            return HubUnavailable(type(exc).__name__, code="Unreachable")
        return _answer_outcome(response.status_code, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


def classify_answer(status: int, body: bytes) -> RealtimeDispatchError | None:
    """What an answer of a push endpoint means for its rows (docs/reference.md, "Push
    outcomes"): :func:`_outcome`, with the hub's refusal code read from ``body`` (a 4xx whose
    body is not :func:`~realtime_dispatch.delivery.push.hub_problem`'s came from a proxy, an
    ingress or a wrong path: transient)."""
    return _outcome(status, hub_problem_code(body) if 400 <= status < 500 else None)


def _outcome(status: int, refusal: str | None) -> RealtimeDispatchError | None:
    """2xx: pushed. A 4xx other than 401/403/408/429 that the hub itself gave (``refusal``, its
    code): permanent, the row is quarantined. 401/403 (a wrong key, fixed by an operator), 408,
    429, 5xx, and a 4xx not the hub's: transient."""
    if 200 <= status < 300:
        return None
    code = f"Http{status}"
    if 400 <= status < 500 and status not in (401, 403, 408, 429):
        if refusal is not None:
            return PushRejected(f"hub refused the push ({refusal})", code=code)
        return HubUnavailable(f"answered {status}, not by the hub (proxy or wrong URL?)", code=code)
    return HubUnavailable(f"hub answered {status}", code=code)


def _answer_outcome(status: int, body: bytes) -> PublishResult:
    """The result of a whole answer (a one-push request, or a batch refused as a whole)."""
    if status in (401, 403):
        _log.error("hub_push_unauthorized", status=status)
    return classify_answer(status, body)


def _batch_item(push: Push) -> bytes:
    # The payload's JSON goes in as encoded (no decode and re-encode of the payload).
    return b"".join(
        (
            b'{"group":',
            orjson.dumps(push.group),
            b',"target":',
            orjson.dumps(push.target),
            b',"arguments":[',
            push.payload_json,
            b"]}",
        )
    )


def _batches(pushes: Sequence[Push], marks: Sequence[str] = ()) -> Iterator[tuple[int, int, bytes]]:
    """``(start, end, body)`` of each request: as few as the hub's limits allow, in order,
    each carrying ``marks``. A push too large for any batch goes alone (and the hub refuses it
    alone)."""
    tail = b'],"marks":' + orjson.dumps(list(marks)) + b"}" if marks else _BATCH_TAIL
    empty = len(_BATCH_HEAD) + len(tail)
    start, size = 0, empty
    items: list[bytes] = []
    for index, push in enumerate(pushes):
        item = _batch_item(push)
        if items and (len(items) >= MAX_BATCH_PUSHES or size + len(item) + 1 > MAX_BATCH_BYTES):
            yield start, index, _BATCH_HEAD + b",".join(items) + tail
            start, items, size = index, [], empty
        items.append(item)
        size += len(item) + 1
    if items:
        yield start, len(pushes), _BATCH_HEAD + b",".join(items) + tail
