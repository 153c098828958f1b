"""``hub --workers N`` and ``serve --workers N``: one replica on every core.

A hub process is one event loop, so a replica of one process uses one core. With N workers the
command starts a parent that holds the port and N hub processes (the workers), each started as
the same command in worker mode (:func:`worker_role`).

**A parent that hands out connections, not ``SO_REUSEPORT``.** The parent accepts every TCP
connection, peeks at its first request line without consuming it (``MSG_PEEK``) and passes the
socket itself to a worker over a Unix socket (``SCM_RIGHTS``); the worker serves it as if it had
accepted it. Chosen because a SignalR connection is several HTTP requests: the negotiate, then
the WebSocket, or an SSE stream and its ``POST``\\ s, or a long poll's every request. With
``SO_REUSEPORT`` the kernel picks a worker per connection by a hash of the addresses, so a
negotiate and its connection would land on different workers. Here a worker's negotiations hand
out tokens that name it (``w1.…``, :func:`~realtime_dispatch.hub.transports.negotiate.
worker_prefix`), and a connection whose first request carries ``?id=w1.…`` goes to worker 1.
A request with a bearer token (header or ``access_token``) goes to its user's worker (a CRC-32
of the token's user claim, read unverified: the worker checks the token), so that all of a
user's connections are on one worker and the per-user caps (connections, negotiations, REST
sends) hold for the replica as they do for one process; while that worker restarts they go to
another. Any other request goes to the next ready worker in turn. The parent peeks at the
start of each TCP connection and at nothing else of the traffic: WebSocket frames, SSE events
and responses go between the worker and the client directly.

A keep-alive connection carries later requests to the worker that got its first one; a client
whose connection pool mixes several hub connections (a browser's six per origin) can send a
request for worker 1's connection on a connection held by worker 0. That worker forwards it to
worker 1 over worker 1's own Unix socket (:mod:`realtime_dispatch.hub.serving.forward`).

**Sharing pushes.** The workers are replicas on one backplane: every push published by one
(the dispatcher's, a ``POST`` to the push endpoint) reaches the members on all of them, and
presence and typing work across them as across replicas. With ``REALTIME_BACKPLANE`` set the
configured Redis is used; without it the parent runs a private ``redis-server`` on a Unix
socket in its run directory (no port, nothing saved), and a missing ``redis-server`` stops the
start with one line (exit 2).

**The parent answers ``/readyz`` and ``/metrics``** on a connection whose first request is one
of them: ready once every worker has been (it asks each over its Unix socket), then while any
worker is; and every worker's metrics in one page, each sample labelled ``worker``. ``serve``
runs its dispatcher in worker 0 only. A worker that exits is started again (after 0.5 s, up to
5 s when it keeps failing); its clients reconnect and resume as after any restart. SIGTERM /
SIGINT stop the workers gracefully (each closes its connections with a close message that
allows reconnecting), then the parent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from realtime_dispatch.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.hub.transports.negotiate import worker_of

log = structlog.get_logger(__name__)

WORKER_INDEX_ENV = "REALTIME_HUB_WORKER_INDEX"
WORKER_FD_ENV = "REALTIME_HUB_WORKER_FD"
WORKER_DIR_ENV = "REALTIME_HUB_WORKER_DIR"
"""Set by the parent for its workers only (their index, their channel's descriptor, the run
directory of their Unix sockets); not meant to be set by hand."""

PEEK_BYTES = 8192
"""How much of a connection's first bytes the parent looks at (the request line is in them)."""
FIRST_BYTES_WAIT = 10.0
"""How long the parent waits for a new connection's first bytes before handing it over anyway
(the worker's own header timeout then answers a silent client)."""
RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 5.0
STOP_GRACE = 25.0
"""How long a stopping worker has to close its connections before it is killed."""
PROBE_INTERVAL = 0.5
PROBE_TIMEOUT = 2.0
PARENT_PATHS = (b"/readyz", b"/metrics")


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """What a worker process is told by its parent."""

    index: int
    channel: socket.socket
    """Its end of the parent's channel: the connections handed over arrive on it."""
    directory: Path

    @property
    def socket_path(self) -> str:
        return worker_socket(self.directory, self.index)


def worker_socket(directory: Path, index: int) -> str:
    """Worker ``index``'s own Unix socket (the parent's probes, forwarded requests)."""
    return str(directory / f"w{index}.sock")


def worker_role(environ: Mapping[str, str]) -> WorkerRole | None:
    """This process's role when its parent started it as a worker, else None."""
    index = environ.get(WORKER_INDEX_ENV)
    if index is None:
        return None
    channel = socket.socket(fileno=int(environ[WORKER_FD_ENV]))
    return WorkerRole(int(index), channel, Path(environ[WORKER_DIR_ENV]))


def worker_argv(command: str, *, host: str, port: int, dev: bool) -> list[str]:
    """The command line a worker runs: the parent's command, one process."""
    argv = [sys.executable, "-m", "realtime_dispatch.cli.main", command]
    argv += ["--host", host, "--port", str(port), "--workers", "1"]
    return [*argv, "--dev"] if dev else argv


@contextlib.asynccontextmanager
async def private_broker(directory: Path, workers: int) -> AsyncIterator[str]:
    """A ``redis-server`` of this replica alone on a Unix socket in ``directory``: the
    workers' backplane when none is configured. Yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigurationError(
            "REALTIME_HUB_WORKERS",
            f"{workers} workers share pushes through a backplane: set REALTIME_BACKPLANE=redis"
            " and REALTIME_REDIS_URL, or install redis-server (the parent then runs one of its"
            " own)",
        )
    path = directory / "redis.sock"
    process = await asyncio.create_subprocess_exec(
        binary,
        *("--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700"),
        *("--save", "", "--appendonly", "no", "--loglevel", "warning"),
        stdout=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        deadline = time.monotonic() + 10.0
        while not await _answers_ping(path):
            if process.returncode is not None or time.monotonic() > deadline:
                raise ConfigurationError(
                    "REALTIME_HUB_WORKERS", f"the workers' redis-server ({binary}) did not start"
                )
            await asyncio.sleep(0.05)
        yield f"unix://{path}"
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def die_with_parent() -> None:
    """In a child between fork and exec: SIGTERM when the parent dies, even by SIGKILL (Linux's
    ``PR_SET_PDEATHSIG``; nothing elsewhere). A worker notices by its channel closing."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


async def _answers_ping(path: Path) -> bool:
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
    except OSError:
        return False
    try:
        writer.write(b"PING\r\n")
        async with asyncio.timeout(1.0):
            return (await reader.readline()).startswith(b"+PONG")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()


async def ask_worker(path: str, target: str) -> tuple[int, bytes]:
    """``GET target`` of a worker over its Unix socket: (status, body); (0, b"") when it does
    not answer."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_unix_connection(path)
            try:
                writer.write(f"GET {target} HTTP/1.0\r\nhost: worker\r\n\r\n".encode())
                response = await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return 0, b""
    head, _, body = response.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return 0, b""
    return int(parts[1]), body


def merged_metrics(pages: Sequence[tuple[int, bytes]]) -> bytes:
    """Every worker's ``/metrics`` in one page, each sample labelled with its ``worker``."""
    families: dict[str, Metric] = {}
    for index, page in pages:
        for family in text_string_to_metric_families(page.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for sample in family.samples:
                labels = {**sample.labels, "worker": str(index)}
                merged.add_sample(sample.name, labels, sample.value, sample.timestamp)

    class Pages:
        def collect(self) -> list[Metric]:
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Pages())
    return generate_latest(registry)


class Worker:
    """One worker process, its channel and its readiness as the parent last saw it."""

    def __init__(self, index: int, directory: Path) -> None:
        self.index = index
        self.socket_path = worker_socket(directory, index)
        self.process: asyncio.subprocess.Process | None = None
        self.channel: socket.socket | None = None
        self.ready = False
        self.backlog: deque[socket.socket] = deque()
        """Connections waiting for room in the channel."""
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


class Parent:
    """The parent of ``--workers N``: the listener, the workers, their supervision."""

    def __init__(
        self,
        listener: socket.socket,
        argv: Sequence[str],
        env: Mapping[str, str],
        count: int,
        directory: Path,
        *,
        user_claim: str = "sub",
    ) -> None:
        self.listener = listener
        self.user_claim = user_claim
        self.argv = list(argv)
        self.env = dict(env)
        self.directory = directory
        self.workers = [Worker(i, directory) for i in range(count)]
        self.turn = itertools.cycle(range(count))
        self.stopping = asyncio.Event()
        self.failed: int | None = None
        self.waiting: dict[int, tuple[socket.socket, asyncio.TimerHandle]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.was_ready = False

    # supervision ---------------------------------------------------------------------------

    async def start_worker(self, worker: Worker) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {
            **self.env,
            WORKER_INDEX_ENV: str(worker.index),
            WORKER_FD_ENV: str(child_end.fileno()),
            WORKER_DIR_ENV: str(self.directory),
        }
        with contextlib.suppress(FileNotFoundError):
            os.unlink(worker.socket_path)
        try:
            worker.process = await asyncio.create_subprocess_exec(
                *self.argv, env=env, pass_fds=[child_end.fileno()]
            )
        finally:
            child_end.close()
        parent_end.setblocking(False)
        worker.channel = parent_end
        worker.ready = False
        worker.starts += 1
        log.info("hub_worker_started", worker=worker.index, pid=worker.process.pid)

    async def supervise(self, worker: Worker) -> None:
        delay = RESTART_DELAY
        while not self.stopping.is_set():
            started = time.monotonic()
            await self.start_worker(worker)
            assert worker.process is not None
            code = await worker.process.wait()
            self.drop_channel(worker)
            if self.stopping.is_set():
                return
            if code == EXIT_USAGE and worker.starts == 1:
                # A setting the worker refused (it said which): every worker would.
                self.failed = EXIT_USAGE
                self.stopping.set()
                return
            log.warning("hub_worker_exited", worker=worker.index, code=code, restart_in=delay)
            await asyncio.sleep(delay)
            lived = time.monotonic() - started
            delay = RESTART_DELAY if lived > 60 else min(delay * 2, MAX_RESTART_DELAY)

    def drop_channel(self, worker: Worker) -> None:
        worker.ready = False
        if worker.channel is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_writer(worker.channel.fileno())
            worker.channel.close()
            worker.channel = None
        while worker.backlog:
            worker.backlog.popleft().close()

    async def probe(self) -> None:
        """Keep each worker's readiness current (its ``/readyz`` over its Unix socket)."""
        while not self.stopping.is_set():
            statuses = await asyncio.gather(
                *(ask_worker(w.socket_path, "/readyz") for w in self.workers)
            )
            for worker, (status, _) in zip(self.workers, statuses, strict=True):
                worker.ready = worker.alive and status == 200
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PROBE_INTERVAL):
                    await self.stopping.wait()

    # connections ---------------------------------------------------------------------------

    def accept(self) -> None:
        for _ in range(512):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the backlog keeps the rest
                log.warning("hub_accept_failed", error=str(exc))
                return
            conn.setblocking(False)
            self.first_bytes(conn)

    def first_bytes(self, conn: socket.socket) -> None:
        try:
            head = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            loop = asyncio.get_running_loop()
            fd = conn.fileno()
            loop.add_reader(fd, self.readable, fd)
            timer = loop.call_later(FIRST_BYTES_WAIT, self.readable, fd)
            self.waiting[fd] = (conn, timer)
            return
        except OSError:
            head = b""
        self.route(conn, head)

    def readable(self, fd: int) -> None:
        conn, timer = self.waiting.pop(fd)
        timer.cancel()
        asyncio.get_running_loop().remove_reader(fd)
        try:
            head = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            head = b"-"  # nothing yet (the wait ran out): a worker's header timeout decides
        except OSError:
            head = b""
        self.route(conn, head)

    def route(self, conn: socket.socket, head: bytes) -> None:
        """Hand ``conn`` to a worker by its first bytes ``head``; none (the client closed, or
        the peek failed): close it."""
        if not head:
            conn.close()
            return
        target = request_target(head, self.user_claim)
        if target.method == b"GET" and target.path in PARENT_PATHS:
            task = asyncio.create_task(self.answer(conn, target.path))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            return
        count = len(self.workers)
        worker = None
        if target.named is not None and target.named < count:
            worker = self.workers[target.named]
        elif target.user is not None:
            worker = self.workers[user_worker(target.user, count)]
            if not worker.ready:  # restarting: the user's connections go elsewhere meanwhile
                worker = self.next_worker()
        else:
            worker = self.next_worker()
        if worker is None or worker.channel is None:
            conn.close()  # no worker running (they are restarting): the client retries
            return
        if worker.backlog:
            worker.backlog.append(conn)
            return
        self.hand(worker, conn)

    def is_ready(self) -> bool:
        """The replica's readiness: once every worker has been ready, while any worker is (one
        that restarts leaves its users to the others meanwhile, and a load balancer need not
        drain the replica for it); never while stopping."""
        if self.stopping.is_set():
            return False
        if all(w.ready for w in self.workers):
            self.was_ready = True
            return True
        return self.was_ready and any(w.ready for w in self.workers)

    def next_worker(self) -> Worker | None:
        candidates = [w for w in self.workers if w.ready] or [
            w for w in self.workers if w.channel is not None
        ]
        if not candidates:
            return None
        for _ in range(len(self.workers)):
            worker = self.workers[next(self.turn)]
            if worker in candidates:
                return worker
        return candidates[0]

    def hand(self, worker: Worker, conn: socket.socket) -> None:
        assert worker.channel is not None
        try:
            socket.send_fds(worker.channel, [b"c"], [conn.fileno()])
        except (BlockingIOError, InterruptedError):
            worker.backlog.append(conn)
            asyncio.get_running_loop().add_writer(worker.channel.fileno(), self.flush, worker)
            return
        except OSError:  # the worker is gone; its supervisor restarts it
            conn.close()
            return
        conn.close()  # the worker holds it now

    def flush(self, worker: Worker) -> None:
        if worker.channel is None:
            return
        channel = worker.channel
        while worker.backlog:
            conn = worker.backlog[0]
            try:
                socket.send_fds(channel, [b"c"], [conn.fileno()])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.drop_channel(worker)
                return
            worker.backlog.popleft().close()
        asyncio.get_running_loop().remove_writer(channel.fileno())

    async def answer(self, conn: socket.socket, path: bytes) -> None:
        """``/readyz`` or ``/metrics`` for the whole replica, then close."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(FIRST_BYTES_WAIT):
                received = b""
                while b"\r\n\r\n" not in received and len(received) < 65536:
                    chunk = await loop.sock_recv(conn, 4096)
                    if not chunk:
                        return
                    received += chunk
            if path == b"/readyz":
                ready = self.is_ready()
                status = b"200 OK" if ready else b"503 Service Unavailable"
                body = b'{"status":"ready"}' if ready else b'{"status":"not ready"}'
                kind = b"application/json"
            else:
                pages = await asyncio.gather(
                    *(ask_worker(w.socket_path, "/metrics") for w in self.workers)
                )
                status, kind = b"200 OK", b"text/plain; version=0.0.4; charset=utf-8"
                body = merged_metrics(
                    [
                        (w.index, page)
                        for w, (code, page) in zip(self.workers, pages, strict=True)
                        if code == 200
                    ]
                )
            head = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (
                status,
                kind,
                len(body),
            )
            await loop.sock_sendall(conn, head + b"connection: close\r\n\r\n" + body)
        except (OSError, TimeoutError):
            pass
        finally:
            conn.close()

    # the whole -----------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        supervisors = [asyncio.create_task(self.supervise(w)) for w in self.workers]
        prober = asyncio.create_task(self.probe())
        self.listener.setblocking(False)
        loop.add_reader(self.listener.fileno(), self.accept)
        try:
            await self.stopping.wait()
        finally:
            loop.remove_reader(self.listener.fileno())
            self.listener.close()
            for fd, (conn, timer) in list(self.waiting.items()):
                timer.cancel()
                loop.remove_reader(fd)
                conn.close()
            self.waiting.clear()
            await self.stop_workers()
            for task in [*supervisors, prober]:
                task.cancel()
            await asyncio.gather(*supervisors, prober, *self.tasks, return_exceptions=True)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return self.failed if self.failed is not None else EXIT_OK

    async def stop_workers(self) -> None:
        running = [w.process for w in self.workers if w.alive and w.process is not None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_GRACE):
                await asyncio.gather(*(p.wait() for p in running))
        for process in running:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for worker in self.workers:
            self.drop_channel(worker)


@dataclass(frozen=True, slots=True)
class Target:
    """What the parent reads of a connection's first request."""

    method: bytes
    path: bytes
    named: int | None
    """The worker its ``id`` names (a connection of that worker's negotiation)."""
    user: str | None
    """The user its bearer token names, unverified (routing only: the worker verifies it)."""


def request_target(head: bytes, user_claim: str = "sub") -> Target:
    """The :class:`Target` of the start of a request (its line and the headers in ``head``)."""
    line, _, headers = head.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) < 2:
        return Target(b"", b"", None, None)
    path, _, query = parts[1].partition(b"?")
    named = None
    token = None
    for field in query.split(b"&"):
        if field.startswith(b"id="):
            named = worker_of(unquote(field[3:].decode("latin-1")))
        elif field.startswith(b"access_token="):
            token = unquote(field[13:].decode("latin-1"))
    if token is None:
        for header in headers.split(b"\r\n"):
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, credentials = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    token = credentials.strip().decode("latin-1")
                break
            if not header:
                break
    return Target(parts[0], path, named, unverified_user(token, user_claim))


def unverified_user(token: str | None, claim: str) -> str | None:
    """The ``claim`` of a JWT's payload, read without checking the signature (None when it is
    not a JWT or has no such claim)."""
    if token is None or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    value = claims.get(claim) if isinstance(claims, dict) else None
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def user_worker(user: str, count: int) -> int:
    """The worker of a user's connections: the same in every process (CRC-32, not ``hash``)."""
    return zlib.crc32(user.encode()) % count


def raise_descriptor_limit() -> None:
    """The soft limit of open files up to the hard one: the parent holds every connection
    between its accept and its hand-over, and the kernel counts descriptors in flight."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run_workers(
    command: str,
    count: int,
    *,
    host: str,
    port: int,
    dev: bool,
    env: Mapping[str, str],
    backplane: bool,
    user_claim: str = "sub",
) -> int:
    """Hold ``host:port`` and run ``count`` workers of ``command`` behind it until SIGTERM /
    SIGINT. ``env``: the workers' environment (the database URL of an embedded PostgreSQL the
    caller started, say); ``backplane``: one is configured (else a private one is started)."""
    raise_descriptor_limit()
    listener = socket.create_server((host, port), backlog=4096)
    with tempfile.TemporaryDirectory(prefix="realtime-dispatch-") as run_dir:
        directory = Path(run_dir)
        os.chmod(directory, 0o700)
        async with contextlib.AsyncExitStack() as stack:
            worker_env = {**env, "REALTIME_HUB_WORKERS": "1"}
            if not backplane:
                url = await stack.enter_async_context(private_broker(directory, count))
                worker_env |= {"REALTIME_BACKPLANE": "redis", "REALTIME_REDIS_URL": url}
            argv = worker_argv(command, host=host, port=port, dev=dev)
            parent = Parent(listener, argv, worker_env, count, directory, user_claim=user_claim)
            print(
                f"realtime-dispatch: {count} {command} workers on http://{host}:{port}"
                f" (pid {os.getpid()})",
                file=sys.stderr,
                flush=True,
            )
            code = await parent.run()
    return EXIT_FAILURE if code not in {EXIT_OK, EXIT_USAGE} else code
