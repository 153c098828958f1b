"""The server distribution builds without a packaging warning and carries the client SDK, and
``make serve`` installs only what ``serve`` needs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_server_wheel_builds_cleanly_and_contains_the_client(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", tmp_path, ROOT],
        check=False,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    output = build.stdout + build.stderr
    assert "BuildBackendWarning" not in output, output[-3000:]
    assert "deprecated" not in output.lower(), output[-3000:]
    (wheel,) = tmp_path.glob("realtime_dispatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        headers = archive.read(metadata).decode()
    assert "License-Expression: MIT" in headers.splitlines()
    assert "realtime_dispatch_client/client.py" in names
    assert "realtime_dispatch/client.py" in names


def test_make_serve_installs_the_embedded_extra_alone(tmp_path: Path) -> None:
    # make's plan for a fresh .venv (-n: print, run nothing; -B: as if nothing were built yet)
    plan = subprocess.run(
        ["make", "-n", "-B", "-C", ROOT, "serve", "VENV=" + str(tmp_path / "venv")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    installs = [line for line in plan.splitlines() if " install " in line and " -e " in line]
    assert installs == [f"{tmp_path}/venv/bin/pip install --quiet -e '.[embedded]'"], plan
    assert "realtime-dispatch serve" in plan
