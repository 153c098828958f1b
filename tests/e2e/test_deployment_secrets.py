"""No generated secret outside development mode: without ``--dev`` / ``REALTIME_DEV=true`` (or
the embedded default) no command reads or writes ``dev-secrets.json``. A secret the process
needs stops it with exit 2 naming it; a feature without its secret that the deployment does not
need is off, said in one line at start."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import httpx
import orjson
import pytest

from support.procs import cli_env, free_port, run_cli, start_cli, stop, wait_for_line, wait_until

SECRET = "s" * 40


def test_hub_without_a_backplane_needs_the_service_key(tmp_path: Path) -> None:
    env = cli_env(
        REALTIME_DATABASE_URL="postgresql://nobody@127.0.0.1:9/none",
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_DATA_DIR=str(tmp_path),
    )
    result = run_cli("hub", env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: invalid setting REALTIME_HUB_SERVICE_KEY: required by hub without"
        " a backplane (its workers push to it over HTTP)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
async def test_a_backplane_hub_without_service_key_runs_with_the_push_endpoint_off(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_BACKPLANE_ENABLED="true",
        REALTIME_REDIS_URL=redis_url,
        REALTIME_DATA_DIR=str(tmp_path),
    )
    proc = await start_cli("hub", "--port", str(port), env=env)
    try:
        off = await wait_for_line(proc, b"REALTIME_HUB_SERVICE_KEY")
        media = await wait_for_line(proc, b"REALTIME_MEDIA_JITSI_APP_SECRET")
        await wait_for_line(proc, b"listening on")

        async def ready() -> bool:
            try:
                async with httpx.AsyncClient() as http:
                    answer = await http.get(f"http://127.0.0.1:{port}/readyz")
                    return answer.status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(ready, within=30)
        async with httpx.AsyncClient() as http:  # the push endpoint: off, every key refused
            push = await http.post(
                f"http://127.0.0.1:{port}/api/v1/hubs/messenger/groups/user:x",
                headers={"Authorization": "Bearer anything"},
                json={"target": "t", "arguments": []},
            )
            assert push.status_code == 401
    finally:
        assert await stop(proc) == 0
    assert off.decode().strip() == (
        "realtime-dispatch: REALTIME_HUB_SERVICE_KEY not set: the push endpoint is off"
        " (pushes come through the backplane)"
    )
    assert b"the media routes answer 503" in media
    assert not (tmp_path / "dev-secrets.json").exists()  # no dev-secrets.json


def test_token_reads_the_dev_file_in_development_mode_only(tmp_path: Path) -> None:
    (tmp_path / "dev-secrets.json").write_bytes(orjson.dumps({"hub_jwt_secret": SECRET}))
    env = cli_env(
        REALTIME_DATABASE_URL="postgresql://nobody@127.0.0.1:9/none",
        REALTIME_DATA_DIR=str(tmp_path),
    )
    refused = run_cli("token", "--user", str(uuid4()), env=env)
    assert refused.returncode == 2
    assert "REALTIME_HUB_JWT_SECRET" in refused.stderr
    asked = run_cli("token", "--user", str(uuid4()), env={**env, "REALTIME_DEV": "true"})
    assert asked.returncode == 0, asked.stderr
    # the embedded default (no database URL) is development mode, as `make serve` is
    embedded = {k: v for k, v in env.items() if k != "REALTIME_DATABASE_URL"}
    assert run_cli("token", "--user", str(uuid4()), env=embedded).returncode == 0
