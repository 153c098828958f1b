"""The media pipeline's recording status service, asked over HTTP (httpx):
``GET {url}/{recordingId}``. Every failure becomes an ``unreachable`` answer with its cause:
the retry decides what that means (:mod:`.finalize_policy`)."""

from __future__ import annotations

from uuid import UUID

import httpx

from realtime_dispatch.messenger.jobs.finalize_policy import Answer, AskResult, parse_answer

ASK_TIMEOUT_SECONDS = 5.0
MAX_CONNECTIONS = 16
"""Asks in flight at once (the pool's limit): a sweep of thousands does not open thousands of
connections to the media pipeline."""


class RecordingStatusClient:
    """One connection pool to the status service; ``async with`` opens and closes it."""

    def __init__(self, base_url: str, *, timeout: float = ASK_TIMEOUT_SECONDS) -> None:
        self._base = base_url.rstrip("/")
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> RecordingStatusClient:
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS)
        # The pool's wait for a free connection counts as well: a sweep's asks queue here.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout, pool=None), limits=limits
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def ask(self, recording_id: UUID) -> Answer:
        if self._client is None:
            raise RuntimeError("RecordingStatusClient used outside 'async with'")
        try:
            response = await self._client.get(f"{self._base}/{recording_id}")
        except httpx.HTTPError as exc:
            return Answer(AskResult.UNREACHABLE, type(exc).__name__)
        return parse_answer(response.status_code, response.content)
