"""Real processes for the tests and the benchmarks: the ``realtime-dispatch`` command run and
stopped (:func:`run_cli`, :func:`start_cli`, :func:`running`, :class:`Proc`), free ports,
waiting for a condition, and a process's readings from ``/proc`` (CPU seconds, resident
memory)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

COMMAND = [sys.executable, "-m", "realtime_dispatch.cli.main"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(
    predicate: Callable[[], Any], within: float = 10.0, interval: float = 0.02
) -> None:
    """Poll an async or sync zero-argument predicate until it is truthy."""
    deadline = time.monotonic() + within
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


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


# --- readings from /proc (Linux) ------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (raises OSError once it has exited)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_of(pids: Iterable[int]) -> float:
    """:func:`cpu_seconds` summed over ``pids``, 0 for one that is gone."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def cpu_seconds_ns(pid: int) -> float:
    """CPU seconds of ``pid``'s live threads so far, at the scheduler's nanosecond resolution
    (``/proc/<pid>/task/*/schedstat``): for short runs, where :func:`cpu_seconds`' clock
    ticks (10 ms) are a large part of what is measured. A thread that exits takes its time with
    it, so use it for servers whose threads live as long as they do."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` (resident now) and ``VmHWM`` (its peak) of ``pid`` in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            values[name] = int(rest.split()[0])
    return values


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (raises OSError once it has exited)."""
    found = memory_kib(pid).get("VmRSS")
    if found is None:
        raise OSError(f"no VmRSS for {pid}")
    return found


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (raises OSError once it has exited)."""
    return rss_kib(pid) / 1024


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                queue += [int(c) for c in (task / "children").read_text().split()]
    return found


# --- a long-running command with its output in a log file -----------------------------------


class Proc:
    """A command (``realtime-dispatch`` unless ``command`` says otherwise) run as a subprocess
    whose output goes to ``log_path`` (never a pipe that could fill up and stall it), or one
    started elsewhere (:meth:`adopt`).

    ``port``: appended as ``--port``, and readiness is ``GET /readyz``; without it readiness is
    the log's next ``dispatcher_connected``. ``group``: it starts processes of its own (``hub
    --workers N``: a parent, its workers, their redis-server); it runs in a process group of
    its own, is killed whole, and its CPU is the whole tree's. :meth:`sample` keeps the last
    CPU reading and the peak resident memory."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: Path | None,
        *,
        port: int | None = None,
        group: bool = False,
        command: Sequence[str] = COMMAND,
        name: str | None = None,
    ) -> None:
        self.args, self.env, self.log_path = tuple(args), dict(env), log_path
        self.port, self.group, self.command = port, group, tuple(command)
        self.name = name or (log_path.stem if log_path is not None else self.args[0])
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.cpu0 = self.cpu_last = self.rss_max = 0.0

    @classmethod
    def adopt(cls, name: str, process: asyncio.subprocess.Process) -> Proc:
        """A process already started (its own pipes): for its readings and its end."""
        made = cls((), {}, None, name=name)
        made.process = process
        return made

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/hubs/messenger"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self, *, ready: bool = True, within: float = 60) -> None:
        """Start it; unless ``ready`` is false, wait until it is ready (:meth:`wait_ready`)."""
        assert self.log_path is not None, "an adopted process is not started here"
        args = list(self.args)
        if self.port is not None:
            args += ["--port", str(self.port)]
        marks = self.log_text().count("dispatcher_connected")
        with self._open_log() as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                *args,
                env=self.env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=self.group,
            )
        self.starts += 1
        if ready:
            await self.wait_ready(within, _marks=marks)

    def _open_log(self) -> Any:
        assert self.log_path is not None
        return open(self.log_path, "ab")

    async def wait_ready(
        self, within: float = 60, *, port: int | None = None, _marks: int | None = None
    ) -> None:
        """Until ``GET /readyz`` on ``port`` (or its own) answers 200, or (no port) its log
        says ``dispatcher_connected`` once more; fails if it exits first."""
        port = port or self.port
        if port is None:
            marker = b"dispatcher_connected"
            need = (self.log_text().count("dispatcher_connected") if _marks is None else _marks) + 1

            def connected() -> bool:
                self._assert_alive()
                assert self.log_path is not None
                return self.log_path.read_bytes().count(marker) >= need

            await wait_until(connected, within=within, interval=0.05)
            return
        async with httpx.AsyncClient() as http:

            async def answers() -> bool:
                self._assert_alive()
                try:
                    response = await http.get(f"http://127.0.0.1:{port}/readyz")
                except httpx.TransportError:
                    return False
                return response.status_code == 200

            await wait_until(answers, within=within, interval=0.05)

    def _assert_alive(self) -> None:
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(
                f"{self.name} exited with {self.process.returncode}: {self.log_text()[-3000:]}"
            )

    def cpu(self) -> float:
        """CPU seconds so far (the whole tree's for a ``group``; 0 once it is gone)."""
        return cpu_seconds_of(process_tree(self.pid) if self.group else [self.pid])

    def sample(self) -> None:
        """Keep the CPU seconds so far and the peak resident memory (MiB)."""
        with contextlib.suppress(OSError, ValueError):
            self.cpu_last = cpu_seconds(self.pid)
            self.rss_max = max(self.rss_max, rss_mib(self.pid))

    async def kill(self, sig: int = signal.SIGKILL) -> None:
        """``sig`` (SIGKILL unless said) to it, or to its whole group, and wait for its end."""
        if self.process is None or self.process.returncode is not None:
            return
        if self.group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()

    async def stop(self) -> int:
        """SIGTERM and its exit code (SIGKILL and an error after 20 s)."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise

    def log_text(self) -> str:
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
