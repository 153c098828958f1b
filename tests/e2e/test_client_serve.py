"""The client SDK against real ``realtime-dispatch serve`` processes on the embedded PostgreSQL
(no ``REALTIME_DATABASE_URL``): a clean start, delivery and stop that leaves no process behind;
and a server SIGKILLed while messages are being sent, then restarted on the same data dir,
after which the client's timeline is complete, in order and without duplicates."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import orjson
import pytest

from realtime_dispatch.client import ClientOptions, ConnectionOptions, MessengerClient
from support.hub_wire import make_token
from support.procs import cli_env, free_port, start_cli, stop, wait_until

pytestmark = pytest.mark.e2e

FAST_CLIENT = ClientOptions(
    connection=ConnectionOptions(reconnect_base=0.1, reconnect_cap=0.5), resync_retry_cap=0.5
)


def serve_env(data_dir: Path) -> dict[str, str]:
    """No database URL and no libpq defaults: ``serve`` must bring its own PostgreSQL."""
    env = cli_env(REALTIME_DATA_DIR=str(data_dir), REALTIME_DISPATCH_POLLING_INTERVAL="0.2")
    for name in ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "DATABASE_URL"):
        env.pop(name, None)
    return env


def postgres_pids(data_dir: Path) -> list[int]:
    """Processes whose command line names ``data_dir`` (the embedded postmaster and its
    children run with ``-D <data_dir>/postgres``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(data_dir) in cmdline and "postgres" in cmdline:
            found.append(int(entry.name))
    return found


def stop_leftover_postgres(data_dir: Path) -> None:
    """Teardown safety net: stop an embedded server a failed test left running."""
    pid_file = data_dir / "postgres" / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)


@dataclass
class Serve:
    data_dir: Path
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    output: list[str] = field(default_factory=list)
    _readers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.proc = await start_cli("serve", "--port", str(self.port), env=serve_env(self.data_dir))
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._readers = [
            asyncio.create_task(self._collect(self.proc.stdout)),
            asyncio.create_task(self._collect(self.proc.stderr)),
        ]
        async with httpx.AsyncClient(base_url=self.url) as http:
            async with asyncio.timeout(60):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/readyz")).status_code == 200:
                            return
                    assert self.proc.returncode is None, "".join(self.output)
                    await asyncio.sleep(0.05)

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.output.append(line.decode(errors="replace"))

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        code = await stop(self.proc, sig)
        await asyncio.gather(*self._readers)
        return code

    def token(self, user: UUID) -> str:
        secrets = orjson.loads((self.data_dir / "dev-secrets.json").read_bytes())
        return make_token(user, secret=secrets["hub_jwt_secret"], ttl=600)


@contextlib.asynccontextmanager
async def serving(data_dir: Path) -> AsyncIterator[Serve]:
    server = Serve(data_dir)
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.returncode is None:
            await server.stop(signal.SIGKILL)
        stop_leftover_postgres(data_dir)


async def test_serve_without_a_database_url_starts_delivers_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    alice, bob = uuid4(), uuid4()
    async with serving(data_dir) as server:
        await server.start()
        announced = "".join(server.output)
        assert f"starting embedded PostgreSQL in {data_dir / 'postgres'}" in announced
        assert "realtime-dispatch: a token for user" in announced
        assert postgres_pids(data_dir), "the embedded PostgreSQL should be running"
        async with (
            MessengerClient(server.url, server.token(alice), options=FAST_CLIENT) as a,
            MessengerClient(server.url, server.token(bob), options=FAST_CLIENT) as b,
        ):
            chat = await a.rest.create_chat("embedded", [bob])
            await b.track(chat)
            await b.wait_connected()
            await b.settled()  # its connect's own resync is done: the message must come live
            await a.rest.send_message(chat, "hello from an embedded database")
            await wait_until(lambda: len(b.timeline(chat)) == 1)
            assert b.stats.recovered == 0  # it came over the hub
        assert await server.stop() == 0, "".join(server.output)
    assert postgres_pids(data_dir) == []
    assert not (data_dir / "postgres" / "postmaster.pid").exists()


async def _send_all(url: str, token: str, chat: UUID, bodies: list[str]) -> None:
    """Send each body once it is acknowledged, retrying through the outage. A send whose answer
    was lost in the kill may be committed twice: a second message with its own seq."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=5
    ) as http:
        for body in bodies:
            while True:
                try:
                    r = await http.post(f"/api/chats/{chat}/messages", json={"body": body})
                    if r.status_code == 201:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)


async def test_client_timeline_survives_a_sigkilled_and_restarted_serve(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    alice, bob = uuid4(), uuid4()
    bodies = [f"message {n}" for n in range(60)]
    async with serving(data_dir) as server:
        await server.start()
        async with MessengerClient(server.url, server.token(bob), options=FAST_CLIENT) as client:
            async with httpx.AsyncClient(base_url=server.url) as http:
                r = await http.post(
                    "/api/chats",
                    json={"title": "through a crash", "memberUserIds": [str(bob)]},
                    headers={"Authorization": f"Bearer {server.token(alice)}"},
                )
                chat = UUID(r.json()["chatId"])
            await client.track(chat)
            await client.wait_connected()
            sender = asyncio.create_task(_send_all(server.url, server.token(alice), chat, bodies))
            await wait_until(lambda: len(client.timeline(chat)) >= 15, within=20)
            assert await server.stop(signal.SIGKILL) == -signal.SIGKILL
            await asyncio.sleep(0.3)
            assert not client.connected
            await server.start()  # same REALTIME_DATA_DIR: the same embedded database
            await asyncio.wait_for(sender, 60)
            timeline = client.timeline(chat)
            async with httpx.AsyncClient(base_url=server.url) as http:
                r = await http.get(
                    f"/api/chats/{chat}",
                    headers={"Authorization": f"Bearer {server.token(bob)}"},
                )
                last_seq = r.json()["lastSeq"]
            await wait_until(lambda: timeline.contiguous_seq == last_seq, within=20)
            await client.settled()
            messages = timeline.messages()
        assert [m.seq for m in messages] == list(range(1, last_seq + 1))
        assert len({m.message_id for m in messages}) == last_seq
        assert {m.body for m in messages} == set(bodies)  # every body, a lost answer at most twice
        assert client.stats.connects >= 2
        assert client.stats.resumes >= 1  # the reconnect read GET /api/sync from its cursor
        assert client.stats.full_resyncs == 1  # only the first connect
        assert await server.stop() == 0, "".join(server.output)
        # The killed serve's embedded PostgreSQL was adopted by the restart and stopped with it.
        assert postgres_pids(tmp_path) == []
