"""Every benchmark at its smoke size (``--smoke``: seconds, a few clients), through its real path
end to end, so that a change that breaks a benchmark fails CI like any test. Each one reports;
the test asserts that it ran to the end (exit 0) and, where a benchmark counts deliveries, that
it lost nothing. No timing is asserted: CI machines are shared and noisy."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Every benchmark, bench/<group>/<name>.py as "<group>/<name>" (helpers start with "_"), with its
# own smoke arguments past --smoke.
SMOKES: dict[str, list[str]] = {
    "dispatch/drain": [],
    "dispatch/lag": [],
    "dispatch/media_jobs": [],
    "dispatch/owner_cost": [],
    "dispatch/partitions": [],
    "dispatch/retention": [],
    "dispatch/slow_push": [],
    "e2e/scenarios": [],
    "e2e/storm": [],
    "e2e/sweep": [],
    "http/connection_churn": [],
    "http/header_flood": [],
    "http/limits": [],
    "http/pipeline_flood": [],
    "hub/backplane_engines": [],
    "hub/capacity": [],
    "hub/fanout": [],
    "hub/http_push": [],
    "hub/negotiations": [],
    "hub/peers": [],
    "hub/perf_split": [],
    "hub/presence_flood": [],
    "hub/revocation": [],
    "hub/signals": [],
    "sync/query": [],
    "sync/replay": [],
    "sync/resume_cost": [],
}


def benchmarks() -> set[str]:
    return {
        path.relative_to(BENCH).with_suffix("").as_posix()
        for path in BENCH.glob("*/*.py")
        if not path.name.startswith("_")
    }


def test_every_benchmark_has_a_smoke_run() -> None:
    assert benchmarks() == set(SMOKES), "add the new benchmark to SMOKES (and give it --smoke)"


# The smokes are mostly waiting (processes starting, clients connecting, windows of time), so
# they run a few at once, longest first: the module takes about the longest smoke plus a third of
# the rest, instead of their sum. Each test waits for its own smoke's outcome.
PARALLEL = 3
LONGEST_FIRST = [
    "hub/peers",
    "dispatch/media_jobs",
    "e2e/storm",
    "dispatch/lag",
    "dispatch/drain",
    "e2e/sweep",
    "hub/capacity",
]


@dataclass(frozen=True)
class Smoke:
    name: str
    extra: tuple[str, ...] = ()

    def command(self) -> list[str]:
        module = "bench." + self.name.replace("/", ".")
        return [sys.executable, "-m", module, "--smoke", *SMOKES[self.name], *self.extra]


KEY_TYPES = ("--key-types", "uuid,bigint")
DECLARED = {
    "dispatch/drain": ("--declared",),
    "dispatch/lag": ("--scenarios", "half_builtin,half_declared,all_declared"),
}
CENTRIFUGE = ("--server", "centrifuge")
ALL = (
    [Smoke(name) for name in LONGEST_FIRST]
    + [Smoke(name) for name in sorted(set(SMOKES) - set(LONGEST_FIRST))]
    + [
        Smoke("dispatch/drain", KEY_TYPES),
        Smoke("dispatch/lag", KEY_TYPES),
        Smoke("hub/capacity", CENTRIFUGE),
    ]
    + [Smoke(name, extra) for name, extra in DECLARED.items()]
)


def run(smoke: Smoke, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REALTIME_DATABASE_URL": dsn}
    return subprocess.run(
        smoke.command(),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )


@dataclass(frozen=True)
class Runs:
    """Every smoke started, and the result files there were before any of them ran."""

    futures: dict[Smoke, Future[subprocess.CompletedProcess[str]]]
    before: set[Path]

    def outcome(self, smoke: Smoke) -> subprocess.CompletedProcess[str]:
        return self.futures[smoke].result()

    def written(self, pattern: str) -> set[Path]:
        return set(RESULTS.glob(pattern)) - self.before


@pytest.fixture(scope="module")
def smokes(pg_server_url: str) -> Iterator[Runs]:
    """Every smoke started, ``PARALLEL`` at a time."""
    before = set(RESULTS.glob("*.json"))
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = Runs({smoke: pool.submit(run, smoke, pg_server_url) for smoke in ALL}, before)
        yield runs
        for future in runs.futures.values():
            future.cancel()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(set(SMOKES) - {"e2e/scenarios", "e2e/storm"}))
def test_bench_smoke_runs(name: str, smokes: Runs) -> None:
    done = smokes.outcome(Smoke(name))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["dispatch/drain", "dispatch/lag"])
def test_bench_key_types_smoke_runs(name: str, smokes: Runs) -> None:
    """The ``--key-types`` runs: an owner's schema on uuid and on bigint keys."""
    done = smokes.outcome(Smoke(name, KEY_TYPES))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "bigint" in done.stdout


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(DECLARED))
def test_bench_declared_kind_smoke_runs(name: str, smokes: Runs) -> None:
    """Half the rows a kind declared in the manifest against MessageReceived (issue 48)."""
    done = smokes.outcome(Smoke(name, DECLARED[name]))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "declared" in done.stdout


@pytest.mark.timeout(600)
def test_bench_e2e_smoke_delivers_everything(smokes: Runs) -> None:
    done = smokes.outcome(Smoke("e2e/scenarios"))
    assert done.returncode == 0, done.stdout + done.stderr
    [written] = smokes.written("e2e-smoke-*.json")
    result = json.loads(written.read_text())
    [run] = result["runs"]
    assert run["commits"] > 0
    assert run["deliveries"] == run["expected_deliveries"] == run["commits"] * 5
    assert run["lost"] == 0
    assert "p95_ms" in result["summary"]


@pytest.mark.timeout(600)
def test_bench_storm_smoke_brings_everyone_back(smokes: Runs) -> None:
    done = smokes.outcome(Smoke("e2e/storm"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [written] = smokes.written("storm-*.json")
    result = json.loads(written.read_text())
    assert result["messages_written"] > 0
    assert result["lost"] == result["duplicates_shown"] == result["rest_5xx"] == 0
    for storm in result["storms"]:
        assert storm["live"] == storm["caught_up"] == result["args"]["clients"], storm


@pytest.mark.timeout(600)
def test_bench_hub_peers_smoke_runs_the_compiled_peers(smokes: Runs) -> None:
    """The Go peers (built from Debian's packages) ran in the same harness as the hub: each
    delivered its pushes to every member once (the bench checks it, or exits non-zero) and
    reported its CPU per frame and its memory per connection."""
    done = smokes.outcome(Smoke("hub/peers"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = {row["server"]: row for row in json.loads(done.stdout)["results"]}
    for peer in ("go-ws", "go-ws-joined", "centrifuge"):
        assert results[peer]["cpu_us_per_frame_median"] > 0, results[peer]
        assert results[peer]["rss_kib_per_connection"] > 0, results[peer]
    assert "hub-marked_vs_centrifuge" in json.loads(done.stdout)["cpu_ratios"]["10_members"]


@pytest.mark.timeout(600)
def test_bench_hub_capacity_smoke_runs_the_centrifuge_peer(smokes: Runs) -> None:
    """``bench/hub/capacity.py --server centrifuge``: the Centrifuge peer took every connection (the
    token checked, the user's channels subscribed) and delivered every push once."""
    done = smokes.outcome(Smoke("hub/capacity", CENTRIFUGE))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result["valid"], result["runs"]
    [run] = result["runs"]
    assert run["connect"]["connected"] == result["inputs"]["clients"]
    assert run["load"]["received"] == run["load"]["expected"] > 0
