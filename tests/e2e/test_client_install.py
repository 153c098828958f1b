"""The client distribution (``clients/python``) installs into a fresh virtualenv with only its own
dependencies (and pytest, its ``test`` extra), and works there: no server code, no server
dependency, and the client's own tests (``clients/python/tests``) pass against a real ``serve``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from tests.e2e.test_demo_page import serve

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
SECRET = "a-configured-secret-of-at-least-32-bytes"

PROBE = """
import importlib.util, json, sys
import realtime_dispatch_client as client
from realtime_dispatch_client.events import parse_event
import realtime_dispatch.client

event = parse_event("message_received", ({
    "chatId": "7c6f7a3e-1b2c-4d5e-8f90-0a1b2c3d4e5f",
    "messageId": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "seq": 3, "kind": "Text", "sentAt": "2026-12-01T10:00:00Z", "body": "hi", "addedLater": 1,
},))
assert isinstance(event, client.MessageReceived) and event.seq == 3, event
assert realtime_dispatch.client.MessengerClient is client.MessengerClient
server = ("asyncpg", "fastapi", "redis", "uvicorn", "prometheus_client", "pydantic_settings")
print(json.dumps({
    "installed": [m for m in server if importlib.util.find_spec(m) is not None],
    "hub": importlib.util.find_spec("realtime_dispatch.hub") is not None,
    "outbox": importlib.util.find_spec("realtime_dispatch.outbox") is not None,
    "from": client.__file__,
}))
"""


@pytest.fixture
def client_venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv with ``clients/python[test]`` installed, and an environment that has
    nothing of the development one (no PYTHONPATH, no editable checkout on the path)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    clean = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    clean |= {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", f"{PACKAGE}[test]"],
        check=False,
        capture_output=True,
        text=True,
        env=clean,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = subprocess.run(
        [python, "-c", PROBE], check=False, capture_output=True, text=True, cwd=tmp_path, env=clean
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout)
    assert found.pop("from").startswith(str(env_dir))  # the installed copy, not the checkout
    assert found == {"installed": [], "hub": False, "outbox": False}
    return python, clean


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(400)
async def test_the_client_installs_alone_and_passes_its_tests(
    client_venv: tuple[Path, dict[str, str]], database_url: str, tmp_path: Path
) -> None:
    python, clean = client_venv
    async with serve(database_url, tmp_path / "data", REALTIME_HUB_JWT_SECRET=SECRET) as url:
        tests = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "pytest",
            "-q",
            cwd=PACKAGE,
            env=clean
            | {
                "PYTHONDONTWRITEBYTECODE": "1",
                "CLIENT_TEST_URL": url,
                "CLIENT_TEST_JWT_SECRET": SECRET,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output = (await asyncio.wait_for(tests.communicate(), 180))[0].decode(errors="replace")
    assert tests.returncode == 0, output[-4000:]
    summary = output.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert "skipped" not in summary, summary
    assert "failed" not in summary, summary
