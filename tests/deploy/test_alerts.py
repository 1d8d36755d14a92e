"""Alert rules: promtool check and unit tests, annotations, runbooks, k8s copy, metrics."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from balancer.core.lease import LeaseStatus
from balancer.ops.exporter import BalancerMetrics, snapshot_family_names

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "conf" / "prometheus" / "alerts.yaml"
PROMTOOL_TESTS = sorted((REPO / "tests" / "promtool").glob("*.yaml"))
RUNBOOK = REPO / "docs" / "runbook.md"
K8S_RULE = REPO / "k8s" / "base" / "prometheusrule.yaml"

PROMTOOL = shutil.which("promtool") or "promtool"
# Outside CI a machine without promtool skips; in CI (.ci/install-tools installs it) it fails.
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None and os.environ.get("CI") != "true",
    reason="promtool not installed (Debian package prometheus: .ci/install-tools)",
)


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


ALERT_NAMES = [rule["alert"] for rule in rules()]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


@pytest.mark.promtool
@needs_promtool
def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout


@pytest.mark.promtool
@needs_promtool
@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=[p.name for p in PROMTOOL_TESTS])
def test_promtool_unit_tests(test_file: Path) -> None:
    result = subprocess.run(
        [PROMTOOL, "test", "rules", test_file.name],
        cwd=test_file.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_is_unit_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for test_file in PROMTOOL_TESTS:
        for case in yaml.safe_load(test_file.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert set(ALERT_NAMES) - firing == set(), "rules without a firing test"
    assert set(ALERT_NAMES) - quiet == set(), "rules without a not-firing test"


@pytest.mark.parametrize("rule", rules(), ids=ALERT_NAMES)
def test_rule_has_annotations_and_a_runbook_section(rule: dict[str, Any]) -> None:
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    assert rule["labels"]["severity"] in {"critical", "warning"}
    url = annotations["runbook_url"]
    path, _, anchor = url.partition("#")
    assert path == "docs/runbook.md"
    headings = re.findall(r"^#{2,3} (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    assert anchor in {github_anchor(h) for h in headings}, f"no runbook section for {url}"


def test_k8s_prometheus_rule_has_the_same_groups() -> None:
    rule = yaml.safe_load(K8S_RULE.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"], (
        "k8s/base/prometheusrule.yaml differs from conf/prometheus/alerts.yaml: copy the groups"
    )


def exported_names() -> set[str]:
    """Every sample name the exporter can produce, from a registry with all series touched."""
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, process_metrics=False)
    metrics.register_cluster("c")
    metrics.record_split("c", "failed", "topics")
    metrics.set_mode("apply")
    metrics.set_cluster_reachable("c", True)
    metrics.observe_admin_request("c", "GET", 200, 0.1)
    metrics.collector.record_poll("c", "b:8080", failure="no_broker_url", at_s=0.0)
    metrics.collector.load_report_failed("c", "b:8080", "timeout")
    metrics.watch_writer_lease(lambda: LeaseStatus(held=True, holder="bal-0:1", detail=""))
    metrics.observe_batch(
        SimpleNamespace(
            batch_id=1, window_end_ms=0, bundles=(), large_topics=(), events_consumed=1,
            events_rejected={"bad_json": 1}, events_late=0, kafka_lag={0: 1},
            watermark_delay_s=0.0, duration_s=1.0, watermark_ms=1, newest_event_ms=2,
            offsets_skipped={},
        )
    )  # fmt: skip
    names = {s.name for family in registry.collect() for s in family.samples}
    families = {family.name for family in registry.collect()}
    return names | families | set(snapshot_family_names())


def test_alerts_use_only_metrics_the_exporter_has() -> None:
    known = exported_names()
    for rule in rules():
        for name in re.findall(r"\bpulsar_balancer_\w+", rule["expr"]):
            assert name in known, f"{rule['alert']} uses unknown metric {name}"


@pytest.mark.promtool
@needs_promtool
def test_example_prometheus_config_is_valid() -> None:
    config = REPO / "conf" / "prometheus" / "prometheus.yml"
    result = subprocess.run(
        [PROMTOOL, "check", "config", config.name],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert yaml.safe_load(config.read_text())["scrape_configs"][0]["job_name"] == "pulsar-balancer"
