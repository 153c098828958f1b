"""The alert rules and the dashboard only name metrics the code exports."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.hub.metrics import HubMetrics
from realtime_dispatch.messenger.jobs.metrics import JOB_NAMES, MediaJobMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "realtime-dispatch.json"
METRIC = re.compile(r"\bmessenger_realtime_\w+")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}


def exported_series() -> set[str]:
    registry = CollectorRegistry()
    DispatchMetrics(registry)
    HubMetrics(registry)
    MediaJobMetrics(registry)
    families: list[Metric] = list(registry.collect())
    names = {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}
    assert "messenger_realtime_lag_seconds_bucket" in names
    return names


def test_every_alert_expression_names_exported_metrics() -> None:
    rules = yaml.safe_load(RULES.read_text())
    exported = exported_series()
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    assert set(alerts) == {
        "RealtimeDispatchErrorSpike",
        "RealtimeDispatchPendingGrowing",
        "RealtimeDispatchLagSLO",
        "RealtimeDispatchQuarantined",
        "RealtimeDispatchNoPasses",
        "RealtimeCallReaperNoRuns",
        "RealtimeConferenceReaperNoRuns",
        "RealtimeRecordingFinalizeNoRuns",
    }
    for name, rule in alerts.items():
        used = set(METRIC.findall(rule["expr"]))
        assert used, name
        assert used <= exported, (name, used - exported)
        assert rule["annotations"]["runbook"].startswith("docs/runbooks/realtime-dispatch.md#")
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        runbook = (ROOT / "docs" / "runbooks" / "realtime-dispatch.md").read_text()
        headings = {
            re.sub(r"[^a-z0-9 -]", "", line.lstrip("# ").lower()).replace(" ", "-")
            for line in runbook.splitlines()
            if line.startswith("## ")
        }
        assert anchor in headings, (name, anchor, headings)
    assert "> 1" in alerts["RealtimeDispatchLagSLO"]["expr"]
    assert "> 45" in alerts["RealtimeDispatchNoPasses"]["expr"]
    # One "no runs for 1 min" alert per media job, on that job's own series.
    for name, job in zip(
        (
            "RealtimeCallReaperNoRuns",
            "RealtimeConferenceReaperNoRuns",
            "RealtimeRecordingFinalizeNoRuns",
        ),
        JOB_NAMES,
        strict=True,
    ):
        assert "> 45" in alerts[name]["expr"]
        assert "for" not in alerts[name]
        # its last run's age, and (never run) whether a process runs it at all
        assert alerts[name]["expr"].count(f'{{job="{job}"}}') == 3, name
        assert f'messenger_realtime_job_enabled{{job="{job}"}}' in alerts[name]["expr"], name
        assert "absent_over_time" not in alerts[name]["expr"], name


def test_rules_pass_promtool_when_installed() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        # CI installs Debian's prometheus package; elsewhere the parse check above stands alone.
        yaml.safe_load(RULES.read_text())
        return
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_alerts_fire_on_time_under_promtool() -> None:
    """alerts_test.yml: the no-passes alert fires within a minute of the last pass (worker
    stuck, worker dead, never reported) and not across a restart; the error spike names the
    signal its value is the rate of; each media job's no-runs alert fires within a minute of its
    last run, or when a process runs it and it never reported one, and never where no process
    runs it (an adopter's schema)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (CI installs Debian's prometheus package)")
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    assert len(tests["tests"]) == 11
    result = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_are_evaluated_as_often_as_scraped() -> None:
    """The no-passes alert's timing needs 15 s evaluations (Prometheus' default is a minute)."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert config["global"]["evaluation_interval"] == "15s"
    assert yaml.safe_load(RULE_TESTS.read_text())["evaluation_interval"] == "15s"


def test_dashboard_panels_name_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Backlog (pending rows)", "Persist-to-push lag", "Hub connections"} <= titles
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used = set(METRIC.findall(target["expr"]))
            assert used, panel["title"]
            assert used <= exported, (panel["title"], used - exported)
