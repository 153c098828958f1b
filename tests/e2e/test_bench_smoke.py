"""The end-to-end benchmark's smoke scenario: real ``serve``, real WebSocket clients, owners at
a fixed rate. It reports; it asserts only that it ran, lost nothing and wrote its result (no
timing is asserted: CI machines are shared and noisy)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_bench_e2e_smoke_delivers_everything(pg_server_url: str) -> None:
    before = set(RESULTS.glob("e2e-smoke-*.json"))
    done = subprocess.run(
        [
            sys.executable,
            "bench/e2e.py",
            "--scenario",
            "smoke",
            "--runs",
            "1",
            "--dsn",
            pg_server_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [written] = set(RESULTS.glob("e2e-smoke-*.json")) - before
    result = json.loads(written.read_text())
    [run] = result["runs"]
    assert run["commits"] > 0
    assert run["deliveries"] == run["expected_deliveries"] == run["commits"] * 5
    assert run["lost"] == 0
    assert "p95_ms" in result["summary"]
