"""Debian's PgBouncer in transaction pooling mode in front of a test database, with the usual
settings of a deployment (``pool_mode = transaction``,
``ignore_startup_parameters = extra_float_digits``); CI installs the package (``.ci/run``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from support.procs import free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@dataclass
class PgBouncer:
    port: int
    log_path: Path

    def url(self, direct_url: str) -> str:
        """``direct_url`` (its user and database) pointed at PgBouncer."""
        parts = urlsplit(direct_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(("postgresql", f"{user}127.0.0.1:{self.port}", parts.path, "", ""))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


async def _upstream(dsn: str) -> tuple[str, int, str]:
    """Host (or unix socket directory), port and user of the server behind ``dsn``."""
    conn = await asyncpg.connect(dsn)
    try:
        host = await conn.fetchval("SELECT host(inet_server_addr())")
        port = int(await conn.fetchval("SHOW port"))
        folder = (await conn.fetchval("SHOW unix_socket_directories")).split(",")[0].strip()
        user = await conn.fetchval("SELECT current_user")
    finally:
        await conn.close()
    return host or folder, port, user


@contextlib.asynccontextmanager
async def pgbouncer(dsn: str) -> AsyncIterator[PgBouncer]:
    if not os.access(BINARY, os.X_OK):
        pytest.skip("pgbouncer is not installed (CI installs Debian's package)")
    host, port, user = await _upstream(dsn)
    folder = Path(tempfile.mkdtemp(prefix="rd-pgbouncer-"))
    listen = free_port()
    log_path = folder / "pgbouncer.log"
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={host} port={port} user={user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = any
pool_mode = transaction
ignore_startup_parameters = extra_float_digits
max_client_conn = 500
default_pool_size = 20
logfile = {log_path}
"""
    )
    args = [BINARY]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; it drops to this user itself: the owner of the
        # server's unix socket directory when it goes through one (the embedded server's is
        # private to that user), else nobody.
        os.chmod(folder, 0o777)
        user = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
        args += ["-u", user]
    process = await asyncio.create_subprocess_exec(
        *args,
        str(folder / "pgbouncer.ini"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", listen)
                writer.close()
                break
            except OSError:
                if process.returncode is not None:
                    raise AssertionError("pgbouncer exited:\n" + log_path.read_text()) from None
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)
        yield PgBouncer(listen, log_path)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
        shutil.rmtree(folder, ignore_errors=True)
