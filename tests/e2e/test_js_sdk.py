"""The TypeScript SDK (``clients/js``): its generated types and committed browser bundle match a
fresh generation and build, and its ``node --test`` suite passes against a real ``serve``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_demo_page import serve

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECRET = "a-configured-secret-of-at-least-32-bytes"
SERVICE_KEY = "a-service-key-for-the-js-sdk-tests-0123456789"


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=90, check=False
    )


def test_generated_types_match_the_server_models() -> None:
    done = run(sys.executable, "scripts/gen_js_types.py", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_committed_browser_bundle_matches_a_fresh_build() -> None:
    done = run("node", "scripts/build_demo_bundle.mjs", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


async def test_node_suite_against_serve(database_url: str, tmp_path: Path) -> None:
    built = run("node_modules/.bin/tsc", "-p", "clients/js")
    assert built.returncode == 0, built.stdout + built.stderr
    async with serve(
        database_url,
        tmp_path,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_SERVICE_KEY=SERVICE_KEY,
    ) as url:
        proc = await asyncio.create_subprocess_exec(
            "node",
            "--test",
            "--test-concurrency=1",
            "clients/js/test/",
            cwd=ROOT,
            env={
                "PATH": "/usr/bin:/bin:/usr/local/bin",
                "SDK_TEST_URL": url,
                "SDK_TEST_JWT_SECRET": SECRET,
                "SDK_TEST_SERVICE_KEY": SERVICE_KEY,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, output.decode(errors="replace")
