"""One logical hub connection that keeps itself up: connect, handshake, read events in order,
send SignalR pings, and on any transport failure reconnect with capped, jittered backoff until
the caller cancels :meth:`HubClientConnection.run`. A 401/403 from the hub is the one failure it
does not retry (:class:`HubRefused`): a bad token will not get better.

The WebSocket skips negotiate (the hub accepts that; it is what SignalR calls
``skipNegotiation``) and carries the token as ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from realtime_dispatch_client.exceptions import (
    HubMethodError,
    HubProtocolError,
    HubRefused,
    HubUnavailable,
)
from realtime_dispatch_client.protocol import (
    CLOSE,
    HANDSHAKE,
    PING,
    CloseRecord,
    CompletionRecord,
    EventRecord,
    RecordSplitter,
    invocation_record,
    parse_handshake_response,
    parse_server_record,
    reconnect_delay,
)

log = structlog.get_logger(__name__)

HUB_PATH = "/hubs/messenger"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    reconnect_base: float = 0.25  # first retry after up to this long, doubling …
    reconnect_cap: float = 5.0  # … up to this
    ping_interval: float = 15.0  # a SignalR ping this often (the hub drops clients silent 30 s)
    server_timeout: float = 35.0  # nothing from the hub this long (it pings every 15 s): dead
    open_timeout: float = 10.0
    invoke_timeout: float = 10.0  # a hub method's answer (typing, watch_presence) within this

    def __post_init__(self) -> None:
        if not (0 <= self.reconnect_base <= self.reconnect_cap and self.reconnect_cap > 0):
            raise ValueError("need 0 <= reconnect_base <= reconnect_cap, reconnect_cap > 0")
        if min(self.ping_interval, self.server_timeout, self.open_timeout) <= 0:
            raise ValueError("intervals and timeouts must be > 0")


class HubListener(Protocol):
    async def hub_connected(self, reconnect: bool) -> None: ...

    async def hub_disconnected(self) -> None: ...

    async def hub_event(self, record: EventRecord) -> None: ...


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def hub_ws_url(base_url: str) -> str:
    """``http://host:port`` (or an ``https`` one) → ``ws://host:port/hubs/messenger``."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + HUB_PATH, "", ""))


class HubClientConnection:
    def __init__(
        self,
        base_url: str,
        token: str,
        listener: HubListener,
        options: ConnectionOptions | None = None,
        *,
        rng: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._url = hub_ws_url(base_url)
        self._token = token
        self._listener = listener
        self._options = options or ConnectionOptions()
        self._rng = rng
        self._sleep = sleep
        self.connects = 0
        self._ws: ClientConnection | None = None
        self._answers: dict[str, asyncio.Future[object]] = {}
        self._invocations = 0

    async def invoke(self, target: str, *arguments: object) -> object:
        """Invoke a hub method and wait for its completion: its result (None when void).
        Raises :class:`HubUnavailable` while not connected (or when the connection drops before
        the answer) and :class:`HubMethodError` with the hub's text when it answers an error."""
        ws = self._ws
        if ws is None:
            raise HubUnavailable(f"{target}: not connected to the hub")
        self._invocations += 1
        invocation_id = str(self._invocations)
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._answers[invocation_id] = answer
        try:
            await ws.send(invocation_record(invocation_id, target, list(arguments)))
            async with asyncio.timeout(self._options.invoke_timeout):
                return await answer
        except (WebSocketException, TimeoutError) as exc:
            raise HubUnavailable(f"{target}: no answer from the hub") from exc
        finally:
            self._answers.pop(invocation_id, None)

    def _answered(self, record: CompletionRecord) -> None:
        answer = self._answers.get(record.invocation_id)
        if answer is None or answer.done():
            return
        if record.error is not None:
            answer.set_exception(HubMethodError(record.error))
        else:
            answer.set_result(record.result)

    def _lost_answers(self) -> None:
        for answer in self._answers.values():
            if not answer.done():
                answer.set_exception(HubUnavailable("the hub connection dropped"))

    async def run(self) -> None:
        """Stay connected until cancelled; raises :class:`HubRefused` on 401/403."""
        failures = 0
        while True:
            connects = self.connects
            retry_after: float | None = None
            try:
                await self._session()
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    raise HubRefused(f"the hub refused the token ({status})") from exc
                log.info("client_hub_unavailable", status=status)
                retry_after = _seconds(exc.response.headers.get("Retry-After"))
            except (OSError, TimeoutError, WebSocketException, HubProtocolError) as exc:
                log.info("client_hub_lost", error=type(exc).__name__)
            if self.connects > connects:
                failures = 0  # a session that got through its handshake resets the backoff
            failures += 1
            delay = reconnect_delay(
                failures,
                base=self._options.reconnect_base,
                cap=self._options.reconnect_cap,
                jitter=self._rng(),  # full jitter
            )
            if retry_after is not None:  # a hub shedding load said when: then, spread out
                delay = max(delay, retry_after * (1.0 + self._rng()))
            await self._sleep(delay)

    async def _session(self) -> None:
        options = self._options
        async with connect(
            self._url,
            additional_headers={"Authorization": f"Bearer {self._token}"},
            open_timeout=options.open_timeout,
            ping_interval=None,  # SignalR pings only
            close_timeout=2,
            max_size=None,
            compression=None,
        ) as ws:
            splitter = RecordSplitter()
            await ws.send(HANDSHAKE)
            records = await self._handshake(ws, splitter)
            self.connects += 1
            self._ws = ws
            await self._listener.hub_connected(reconnect=self.connects > 1)
            pinger = asyncio.create_task(self._ping(ws), name="hub-client-ping")
            try:
                await self._read(ws, splitter, records)
            except asyncio.CancelledError:
                # Leaving on purpose: say so, so the hub counts a client close, not a loss.
                with contextlib.suppress(WebSocketException):
                    await ws.send(CLOSE)
                raise
            finally:
                self._ws = None
                self._lost_answers()
                pinger.cancel()
                await asyncio.wait([pinger])  # ends it without swallowing our own cancellation
                await self._listener.hub_disconnected()

    async def _handshake(self, ws: ClientConnection, splitter: RecordSplitter) -> list[str]:
        async with asyncio.timeout(self._options.open_timeout):
            while True:
                records = splitter.feed(await ws.recv())
                if records:
                    parse_handshake_response(records[0])
                    return records[1:]

    async def _ping(self, ws: ClientConnection) -> None:
        """Pings until cancelled; a failed send ends it (the reader sees the same failure)."""
        try:
            while True:
                await asyncio.sleep(self._options.ping_interval)
                await ws.send(PING)
        except WebSocketException:
            return

    async def _read(self, ws: ClientConnection, splitter: RecordSplitter, first: list[str]) -> None:
        """Hand events to the listener in arrival order; return when the hub closes."""
        records = first
        while True:
            for record in records:
                message = parse_server_record(record)
                if isinstance(message, EventRecord):
                    await self._listener.hub_event(message)
                elif isinstance(message, CompletionRecord):
                    self._answered(message)
                elif isinstance(message, CloseRecord):
                    log.info(
                        "client_hub_closed",
                        error=message.error,
                        allow_reconnect=message.allow_reconnect,
                    )
                    return
            async with asyncio.timeout(self._options.server_timeout):
                records = splitter.feed(await ws.recv())
