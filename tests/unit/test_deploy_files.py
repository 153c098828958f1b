"""The container image, the compose file, the systemd units and the Prometheus scrape config use
only commands, flags, variables, ports and probe paths that exist: none of them can be built or
started on this machine (no container engine), so they are checked against the CLI parser, the
settings and the routes here, and with ``systemd-analyze verify`` / ``promtool`` where those are
installed."""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from realtime_dispatch.cli.main import _parser
from realtime_dispatch.dispatch.probes import worker_routes
from realtime_dispatch.hub.serving.routes import hub_routes
from realtime_dispatch.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "compose.yaml"
SYSTEMD = ROOT / "deploy" / "systemd"
SCRAPE = ROOT / "deploy" / "prometheus" / "prometheus.yml"
INSTALLED = "/opt/realtime-dispatch/bin/realtime-dispatch"
PROBE_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/[a-z]+)")

VARIABLES = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
HUB_PATHS = {getattr(r, "path", "") for r in hub_routes(object())}  # type: ignore[arg-type]
WORKER_PATHS = {r.path for r in worker_routes([], CollectorRegistry(), alive=lambda: True)}  # type: ignore[attr-defined]


def parse_command(args: list[str]) -> Any:
    """The CLI's own parser: an unknown command or flag fails the test (argparse exits 2)."""
    try:
        return _parser().parse_args(args)
    except SystemExit as exit_:
        pytest.fail(f"the CLI refuses {args!r} (exit {exit_.code})")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def our_services() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if service.get("image", "").startswith("realtime-dispatch")
    }


def probe(service: dict[str, Any]) -> tuple[int, str]:
    [match] = PROBE_URL.findall(" ".join(service["healthcheck"]["test"]))
    return int(match[0]), match[1]


def test_the_image_is_multi_stage_non_root_and_runs_the_cli() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, flags=re.M)
    assert len(stages) >= 2, stages
    runtime = text.split("\nFROM ")[-1]
    assert "COPY --from=build" in runtime
    assert "pip install" not in runtime  # nothing is built in the final stage
    [user] = re.findall(r"^USER\s+(\S+)", runtime, flags=re.M)
    assert user.split(":")[0] not in {"0", "root"}
    [entrypoint] = re.findall(r"^ENTRYPOINT\s+(\[.*\])", text, flags=re.M)
    assert json.loads(entrypoint) == ["realtime-dispatch"]
    [cmd] = re.findall(r"^CMD\s+(\[.*\])", text, flags=re.M)
    assert parse_command(json.loads(cmd)).command == "hub"
    # A deployment's install carries no database binaries (the `embedded` extra is serve's).
    assert re.search(r"pip install \.\s*$", text, flags=re.M), "install the package, no extras"
    exposed = {
        int(p) for line in re.findall(r"^EXPOSE\s+(.*)", text, flags=re.M) for p in line.split()
    }
    ports = {getattr(parse_command(s["command"]), "port", None) for s in our_services().values()}
    assert ports - {None} <= exposed


def test_compose_runs_migrate_once_then_two_hubs_and_a_worker_with_probes() -> None:
    services = compose()["services"]
    assert {"postgres", "redis"} <= set(services)
    ours = our_services()
    roles = {name: parse_command(service["command"]).command for name, service in ours.items()}
    assert sorted(roles.values()) == ["hub", "hub", "migrate", "worker"], roles
    for name, service in ours.items():
        for variable in service["environment"]:
            assert variable in VARIABLES, (name, variable)
        args = parse_command(service["command"])
        if args.command == "migrate":
            assert service["restart"] == "no"
            assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
            continue
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        port, path = probe(service)
        assert port == args.port, name
        assert path in (HUB_PATHS if args.command == "hub" else WORKER_PATHS), (name, path)
        published = {int(p.split(":")[1]) for p in service.get("ports", [])}
        assert published == {args.port}, name
    used = {probe(s)[1] for s in ours.values() if "healthcheck" in s}
    assert used == {"/healthz", "/readyz"}
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"]


def test_the_compose_proxy_is_the_hubs_only_trusted_proxy() -> None:
    """The nginx in front passes X-Forwarded-For; the hubs trust exactly its fixed address."""
    services = compose()["services"]
    proxy = services["proxy"]
    address = proxy["networks"]["default"]["ipv4_address"]
    conf = (ROOT / "deploy" / "nginx" / "nginx.conf").read_text()
    assert "X-Forwarded-For $proxy_add_x_forwarded_for" in conf
    assert 'proxy_set_header Forwarded "";' in conf
    hubs = [s for s in our_services().values() if parse_command(s["command"]).command == "hub"]
    assert hubs
    for hub in hubs:
        trusted = hub["environment"]["REALTIME_HTTP_TRUSTED_PROXIES"]
        settings = Settings(http_trusted_proxies=trusted)
        assert [str(n) for n in settings.trusted_proxy_networks()] == [f"{address}/32"]
    upstreams = set(re.findall(r"server (hub\d):8000;", conf))
    assert upstreams == {n for n, s in our_services().items() if s in hubs}


def unit(path: Path) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, value = line.split("=", 1)
        current[key] = value
    return sections


def test_systemd_units_run_existing_commands_with_known_variables() -> None:
    units = sorted(SYSTEMD.glob("*.service"))
    assert {u.name for u in units} == {
        "realtime-dispatch-migrate.service",
        "realtime-dispatch-hub@.service",
        "realtime-dispatch-worker.service",
    }
    roles = set()
    for path in units:
        service = unit(path)["Service"]
        binary, *args = shlex.split(service["ExecStart"].replace("%i", "8001"))
        assert binary == INSTALLED
        parsed = parse_command(args)
        roles.add(parsed.command)
        assert service["User"] == "realtime"
        assert service["EnvironmentFile"] == "/etc/realtime-dispatch/env"
        if parsed.command != "migrate":
            assert "realtime-dispatch-migrate.service" in unit(path)["Unit"]["Requires"]
    assert roles == {"migrate", "hub", "worker"}
    env = (SYSTEMD / "realtime-dispatch.env").read_text()
    names = re.findall(r"^#?(REALTIME_\w+)=", env, flags=re.M)
    assert names
    assert set(names) <= VARIABLES, set(names) - VARIABLES


def test_systemd_analyze_verifies_the_units_when_installed(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # The units name the installed path; here the command is this environment's.
    command = str(Path(sys.executable).with_name("realtime-dispatch"))
    for path in SYSTEMD.glob("*.service"):
        name = path.name.replace("@.service", "@8001.service")
        (tmp_path / name).write_text(path.read_text().replace(INSTALLED, command))
    result = subprocess.run(
        [analyze, "verify", *sorted(str(p) for p in tmp_path.glob("*.service"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "realtime-dispatch" not in result.stderr, result.stderr


def test_prometheus_scrapes_every_hub_and_worker_on_its_port() -> None:
    config = yaml.safe_load(SCRAPE.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {
        name: {t for group in job["static_configs"] for t in group["targets"]}
        for name, job in jobs.items()
    }
    expected = {
        f"{name}:{parse_command(s['command']).port}"
        for name, s in our_services().items()
        if parse_command(s["command"]).command in ("hub", "worker")
    }
    assert set().union(*targets.values()) == expected
    assert {job["metrics_path"] for job in jobs.values()} == {"/metrics"}
    assert "/metrics" in HUB_PATHS
    assert "/metrics" in WORKER_PATHS
    promtool = shutil.which("promtool")
    if promtool is not None:
        result = subprocess.run(
            [promtool, "check", "config", str(SCRAPE)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
