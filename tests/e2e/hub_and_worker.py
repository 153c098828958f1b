"""The environments of a ``realtime-dispatch hub`` on a port and a worker pushing to it."""

from __future__ import annotations

from collections.abc import Mapping

from tests.hub_fixtures import SECRET, SERVICE_KEY


def hub_and_worker_env(
    env: Mapping[str, str], port: int, **worker_extra: str
) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` (the database's, the schema's) for a hub on ``port`` with the tests' token secret
    and service key, and for a worker pushing to it with that key (and ``worker_extra``)."""
    hub_env = {
        **env,
        "REALTIME_HUB_JWT_SECRET": SECRET,
        "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
    }
    worker_env = {
        **env,
        "REALTIME_HUB_URL": f"http://127.0.0.1:{port}",
        "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
        **worker_extra,
    }
    return hub_env, worker_env
