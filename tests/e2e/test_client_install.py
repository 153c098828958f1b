"""The client distribution (``clients/python``) installs into a fresh virtualenv with only its own
dependencies, and the SDK works there: no server code, no server dependency."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, json, sys
import realtime_dispatch.client as client
from realtime_dispatch.client.events import parse_event

event = parse_event("message_received", ({
    "chatId": "7c6f7a3e-1b2c-4d5e-8f90-0a1b2c3d4e5f",
    "messageId": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "seq": 3, "kind": "Text", "sentAt": "2026-12-01T10:00:00Z", "body": "hi", "addedLater": 1,
},))
assert isinstance(event, client.MessageReceived) and event.seq == 3, event
server = ("asyncpg", "fastapi", "redis", "uvicorn", "prometheus_client", "pydantic_settings")
print(json.dumps({
    "installed": [m for m in server if importlib.util.find_spec(m) is not None],
    "hub": importlib.util.find_spec("realtime_dispatch.hub") is not None,
    "outbox": importlib.util.find_spec("realtime_dispatch.outbox") is not None,
}))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_client_installs_alone_and_works(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            ROOT / "clients" / "python",
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = subprocess.run(
        [python, "-c", PROBE], check=False, capture_output=True, text=True, cwd=tmp_path
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip() == '{"installed": [], "hub": false, "outbox": false}'
