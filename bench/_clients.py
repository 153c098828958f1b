"""A process of real hub clients for the end-to-end benchmark: WebSocket connections speaking
the JSON hub protocol (token in the ``Authorization`` header, no negotiate), each noting
``time.time()`` for every ``message_received`` invocation it gets.

Run as ``python bench/_clients.py SPEC_FILE``; the spec (JSON) holds ``clients`` (a list of
``[ws_url, token]``) and ``out`` (a file for the deliveries). The process prints JSON lines on
stdout: ``{"event": "connected"}`` once every client has finished its handshake, then
``{"event": "progress", "total": n}`` twice a second. A line on stdin (or its end) stops it; it
then writes ``[[message_id, receive_time], ...]`` (one entry per delivery) to ``out`` and prints
``{"event": "done", "total": n}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

RS = "\x1e"
HANDSHAKE = '{"protocol":"json","version":1}' + RS
PING = '{"type":6}' + RS
INVOCATION = '{"type":1'


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class Deliveries:
    """Every delivered ``message_received``: (message id, receive time), in arrival order."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []

    def frame(self, frame: str | bytes, now: float) -> None:
        if isinstance(frame, bytes):
            frame = frame.decode()
        if INVOCATION not in frame:
            return  # pings, completions
        for record in frame.split(RS):
            if record.startswith(INVOCATION):
                message = orjson.loads(record)
                if message.get("target") == "message_received":
                    self.rows.append((message["arguments"][0]["messageId"], now))


async def client(
    url: str, token: str, deliveries: Deliveries, ready: asyncio.Event, failures: list[str]
) -> None:
    try:
        async with connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            ping_interval=None,
            max_size=None,
            compression=None,
            open_timeout=60,
        ) as ws:
            await ws.send(HANDSHAKE)
            answer = await ws.recv()
            if answer != "{}" + RS:
                raise RuntimeError(f"handshake refused: {answer!r}")
            ready.set()
            keepalive = asyncio.create_task(ping(ws))
            try:
                async for frame in ws:
                    deliveries.frame(frame, time.time())
            finally:
                keepalive.cancel()
    except Exception as error:
        failures.append(f"{type(error).__name__}: {error}")
        ready.set()
        raise


async def ping(ws: ClientConnection) -> None:
    while True:
        await asyncio.sleep(10)
        await ws.send(PING)


async def main(spec: dict[str, Any]) -> tuple[Deliveries, list[str]]:
    deliveries = Deliveries()
    failures: list[str] = []
    tasks = []
    gate = asyncio.Semaphore(50)  # handshakes in flight

    async def start(url: str, token: str) -> None:
        async with gate:
            ready = asyncio.Event()
            tasks.append(asyncio.create_task(client(url, token, deliveries, ready, failures)))
            await asyncio.wait_for(ready.wait(), 60)

    await asyncio.gather(*(start(url, token) for url, token in spec["clients"]))
    if failures:
        emit({"event": "failed", "errors": failures[:5]})
        raise SystemExit(1)
    emit({"event": "connected", "clients": len(tasks)})

    async def progress() -> None:
        while True:
            await asyncio.sleep(0.5)
            emit({"event": "progress", "total": len(deliveries.rows), "at": time.time()})

    reporter = asyncio.create_task(progress())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.readline()
    reporter.cancel()
    for task in tasks:
        task.cancel()
    with contextlib.suppress(Exception):
        await asyncio.gather(*tasks, return_exceptions=True)
    return deliveries, failures


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    got, errors = asyncio.run(main(spec))
    Path(spec["out"]).write_bytes(orjson.dumps(got.rows))
    emit({"event": "done", "total": len(got.rows), "failures": errors[:5]})
