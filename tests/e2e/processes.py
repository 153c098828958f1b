"""Running the real ``realtime-dispatch`` command in tests."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence

import httpx

COMMAND = [sys.executable, "-m", "realtime_dispatch.cli.main"]


def cli_env(**values: str) -> dict[str, str]:
    """The parent's environment minus every REALTIME_* variable, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REALTIME_")}
    env.update(values)
    return env


def run_cli(
    *args: str, env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def side_by_side(
    runs: Sequence[tuple[Sequence[str], Mapping[str, str]]],
) -> list[subprocess.CompletedProcess[str]]:
    """:func:`run_cli` of each ``(args, env)`` at once (a command's run is mostly its start-up,
    so a test with many of them waits for the slowest instead of their sum)."""
    return list(
        await asyncio.gather(*(asyncio.to_thread(run_cli, *args, env=env) for args, env in runs))
    )


async def start_cli(*args: str, env: Mapping[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *COMMAND,
        *args,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def wait_for_line(
    proc: asyncio.subprocess.Process, needle: bytes, within: float = 30
) -> bytes:
    """Read the process's stderr until a line contains ``needle``; fail on exit or timeout."""
    assert proc.stderr is not None
    seen: list[bytes] = []
    async with asyncio.timeout(within):
        while True:
            line = await proc.stderr.readline()
            if not line:
                raise AssertionError(
                    f"process exited before {needle!r}:\n" + b"".join(seen).decode(errors="replace")
                )
            seen.append(line)
            if needle in line:
                return line


async def stop(
    proc: asyncio.subprocess.Process,
    sig: int = signal.SIGTERM,
    within: float = 15,
    *,
    logs: LogTail | None = None,
) -> int:
    """Send ``sig`` and wait for the exit code; a process still running ``within`` seconds
    later is killed and fails the test with its last log lines (``logs``: what keeps reading
    its stderr, if something does; else what is left in the pipe)."""
    if proc.returncode is None:
        proc.send_signal(sig)
    try:
        return await asyncio.wait_for(proc.wait(), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        if logs is not None:
            await logs.finished()
            tail = logs.text()
        else:
            tail = await _rest_of_stderr(proc)
        raise TimeoutError(
            f"pid {proc.pid} still ran {within} s after signal {sig}, killed;"
            f" its last log lines:\n{tail}"
        ) from None


async def _rest_of_stderr(proc: asyncio.subprocess.Process, size: int = 6000) -> str:
    if proc.stderr is None:
        return ""
    with contextlib.suppress(RuntimeError):  # another coroutine reads the stream
        return (await proc.stderr.read())[-size:].decode(errors="replace")
    return "(read elsewhere)"


class LogTail:
    """Reads a process's stderr to the end, keeping its last ``lines``: a long run's logs never
    fill the pipe and stall the process, and a failure can show how it ended."""

    def __init__(self, proc: asyncio.subprocess.Process, lines: int = 60) -> None:
        assert proc.stderr is not None
        self._stream = proc.stderr
        self._lines: collections.deque[bytes] = collections.deque(maxlen=lines)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while line := await self._stream.readline():
            self._lines.append(line)

    async def finished(self) -> None:
        """Once the process is gone: every line read."""
        await self._task

    def text(self) -> str:
        return b"".join(self._lines).decode(errors="replace")


@contextlib.asynccontextmanager
async def running(
    *args: str, env: Mapping[str, str], ready: bytes
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The command started, once its stderr says ``ready``; stopped with SIGTERM (exit 0
    expected) at the end. Its stderr is read all along (:class:`LogTail`)."""
    proc = await start_cli(*args, env=env)
    logs: LogTail | None = None
    try:
        await wait_for_line(proc, ready)
        logs = LogTail(proc)
        yield proc
    finally:
        code = await stop(proc, signal.SIGTERM, logs=logs)
        if logs is not None:
            await logs.finished()
        assert code == 0, f"{args[0]} exited {code}; its last log lines:\n" + (
            logs.text() if logs is not None else await _rest_of_stderr(proc)
        )


async def wait_ready(proc: asyncio.subprocess.Process, url: str, within: float = 30) -> None:
    """Until ``GET {url}/readyz`` answers 200; fails if the process exits first."""
    async with httpx.AsyncClient(base_url=url) as http, asyncio.timeout(within):
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await http.get("/readyz")).status_code == 200:
                    return
            assert proc.returncode is None, "the process exited"
            await asyncio.sleep(0.05)
