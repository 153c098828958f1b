"""A local 3-node Redis Cluster for tests, started and stopped with ``deploy/local-cluster.sh``
(the script a user runs too), on free ports below the ephemeral range."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "local-cluster.sh"


def _ports_free(ports: list[int]) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


class LocalRedisCluster:
    def __init__(self) -> None:
        rng = random.Random()
        for _ in range(50):
            base = rng.randrange(20000, 22000, 10)
            # Client ports, their cluster-bus ports (+10000), and the NATS ports of the script.
            ports = [base + i for i in range(3)] + [base + 10000 + i for i in range(3)]
            ports += [base + 3000 + i for i in range(3)] + [base + 6000 + i for i in range(3)]
            if _ports_free(ports):
                break
        else:
            raise RuntimeError("no free port range for a local Redis Cluster")
        self.base = base
        self.folder = Path(tempfile.mkdtemp(prefix="rd-test-cluster-")) / "cluster"
        self.env = dict(
            os.environ,
            REDIS_CLUSTER_PORT=str(base),
            NATS_CLUSTER_PORT=str(base + 3000),
            NATS_ROUTE_PORT=str(base + 6000),
            LOCAL_CLUSTER_ENGINES="redis",
        )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.base}"

    def _run(self, *args: str, check: bool = True) -> None:
        subprocess.run([str(SCRIPT), *args], env=self.env, check=check, capture_output=True)

    def start(self) -> LocalRedisCluster:
        self._run("start", str(self.folder))
        return self

    def kill_node(self, index: int) -> None:
        """kill -9 one node (its slots are unserved until it comes back)."""
        pid = int((self.folder / f"redis-{index}" / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)

    def start_node(self, index: int) -> None:
        self._run("start-redis-node", str(index), str(self.folder))

    def stop(self) -> None:
        self._run("stop", str(self.folder), check=False)
        shutil.rmtree(self.folder.parent, ignore_errors=True)
