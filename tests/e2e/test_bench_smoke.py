"""Every benchmark at its smoke size (``--smoke``: seconds, a few clients), through its real path
end to end, so that a change that breaks a benchmark fails CI like any test. Each one reports;
the test asserts that it ran to the end (exit 0) and, where a benchmark counts deliveries, that
it lost nothing. No timing is asserted: CI machines are shared and noisy."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Every bench/*.py (helpers start with "_"), with its own smoke arguments past --smoke.
SMOKES: dict[str, list[str]] = {
    "backplane_engines": [],
    "drain": [],
    "e2e": [],
    "header_flood": [],
    "http_limits": [],
    "hub_capacity": [],
    "hub_fanout": [],
    "hub_peers": [],
    "hub_revocation": [],
    "hub_signals": [],
    "lag": [],
    "media_jobs": [],
    "negotiations": [],
    "owner_cost": [],
    "partitions": [],
    "perf_split": [],
    "retention": [],
    "slow_push": [],
    "storm": [],
    "sweep": [],
    "sync_query": [],
    "sync_replay": [],
}


def benchmarks() -> set[str]:
    return {path.stem for path in BENCH.glob("*.py") if not path.name.startswith("_")}


def test_every_benchmark_has_a_smoke_run() -> None:
    assert benchmarks() == set(SMOKES), "add the new benchmark to SMOKES (and give it --smoke)"


def run_smoke(name: str, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REALTIME_DATABASE_URL": dsn}
    return subprocess.run(
        [sys.executable, f"bench/{name}.py", "--smoke", *SMOKES[name]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(set(SMOKES) - {"e2e", "storm"}))
def test_bench_smoke_runs(name: str, pg_server_url: str) -> None:
    done = run_smoke(name, pg_server_url)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["drain", "lag"])
def test_bench_key_types_smoke_runs(name: str, pg_server_url: str) -> None:
    """The ``--key-types`` runs: an owner's schema on uuid and on bigint keys."""
    env = {**os.environ, "REALTIME_DATABASE_URL": pg_server_url}
    done = subprocess.run(
        [sys.executable, f"bench/{name}.py", "--smoke", "--key-types", "uuid,bigint"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bigint" in done.stdout


def test_bench_e2e_smoke_delivers_everything(pg_server_url: str) -> None:
    before = set(RESULTS.glob("e2e-smoke-*.json"))
    done = run_smoke("e2e", pg_server_url)
    assert done.returncode == 0, done.stdout + done.stderr
    [written] = set(RESULTS.glob("e2e-smoke-*.json")) - before
    result = json.loads(written.read_text())
    [run] = result["runs"]
    assert run["commits"] > 0
    assert run["deliveries"] == run["expected_deliveries"] == run["commits"] * 5
    assert run["lost"] == 0
    assert "p95_ms" in result["summary"]


@pytest.mark.timeout(180)
def test_bench_storm_smoke_brings_everyone_back(pg_server_url: str) -> None:
    before = set(RESULTS.glob("storm-*.json"))
    done = run_smoke("storm", pg_server_url)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [written] = set(RESULTS.glob("storm-*.json")) - before
    result = json.loads(written.read_text())
    assert result["messages_written"] > 0
    assert result["lost"] == result["duplicates_shown"] == result["rest_5xx"] == 0
    for storm in result["storms"]:
        assert storm["live"] == storm["caught_up"] == result["args"]["clients"], storm
