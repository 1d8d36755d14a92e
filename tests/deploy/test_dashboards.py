"""Grafana dashboards: importable structure, and every panel's PromQL answered by a real Prometheus.

The live test feeds the exporter realistic values through its public API, serves them on
127.0.0.1 (port 0), lets Debian's prometheus scrape them, and runs every panel's expression
through /api/v1/query: an error or an empty result fails the test.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from balancer.core.broker_load import BrokerLoad, LoadSource
from balancer.core.bundles import BundleRange
from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad
from balancer.core.report import BatchReport
from balancer.core.results import ActionResult
from balancer.ops.exporter import BalancerMetrics
from balancer.ops.health import HealthServer
from tests.prometheus_server import (
    DASHBOARD_DIR,
    PrometheusServer,
    check_dashboards,
    check_queries,
    dashboard_queries,
    prometheus_binary,
    resolve_variables,
)
from tests.reports import batch_report

DASHBOARDS = sorted(DASHBOARD_DIR.glob("*.json"))
DS_UID = "${datasource}"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_there_is_an_overview_and_a_bundle_drilldown() -> None:
    assert [p.name for p in DASHBOARDS] == ["bundle-drilldown.json", "overview.json"]
    assert len({load(p)["uid"] for p in DASHBOARDS}) == 2


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_dashboard_is_importable(path: Path) -> None:
    dashboard = load(path)
    assert dashboard["id"] is None  # Grafana assigns ids on import
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": DS_UID}
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": DS_UID}, panel["title"]
        assert panel["targets"], f"{panel['title']}: no targets"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"{panel['title']}: empty expr"
            assert target["datasource"]["uid"] == DS_UID, panel["title"]


def test_drilldown_has_cluster_namespace_bundle_variables() -> None:
    variables = [
        v["name"] for v in load(DASHBOARD_DIR / "bundle-drilldown.json")["templating"]["list"]
    ]
    assert variables == ["datasource", "cluster", "namespace", "bundle"]


def test_panels_use_no_topic_label_and_only_exported_metrics() -> None:
    text = " ".join(
        t["expr"] for p in DASHBOARDS for panel in panels(load(p)) for t in panel.get("targets", [])
    )
    assert not re.search(r"\btopic\s*[=!~]", text)
    assert "pulsar_balancer_" in text


# --- live: a real Prometheus scraping the exporter --------------------------------------------


def report(batch_id: int, window_end_ms: int, bundles: tuple[BundleLoad, ...]) -> BatchReport:
    """A batch with some traffic, rejections, late events and lag, for every panel to show."""
    return batch_report(
        batch_id,
        window_end_ms,
        bundles,
        events_consumed=12_000,
        events_rejected={"bad_json": 3},
        events_late=5,
        kafka_lag={0: 120, 1: 80, 2: 0},
        watermark_delay_s=31.0,
        duration_s=1.4,
    )


def realistic_bundles(window_end_ms: int) -> tuple[BundleLoad, ...]:
    def bundle(cluster: str, ns: str, text: str, rate: float, topics: int) -> BundleLoad:
        return BundleLoad(
            cluster=cluster,
            namespace=ns,
            bundle=BundleRange.parse(text),
            window_end_ms=window_end_ms,
            msg_rate_in=rate * 0.4,
            msg_rate_out=rate * 0.6,
            msg_throughput_in=rate * 0.4 * 1024,
            msg_throughput_out=rate * 0.6 * 1024,
            topic_count=topics,
            session_count=topics * 3,
            reported_topics=topics,
            known_topics=topics + 1,
        )

    return (
        bundle("east", "acme/orders", "0x00000000_0x80000000", 42_000.0, 300),
        bundle("east", "acme/orders", "0x80000000_0xffffffff", 9_000.0, 280),
        bundle("east", "acme/billing", "0x00000000_0xffffffff", 1_200.0, 40),
        bundle("west", "acme/orders", "0x00000000_0xffffffff", 5_000.0, 900),
    )


def feed(metrics: BalancerMetrics, batch_id: int) -> None:
    """One batch's worth of activity, through the exporter's public API only."""
    metrics.observe_batch(report(batch_id, 60_000 * batch_id, realistic_bundles(60_000 * batch_id)))
    metrics.record_split("east", "decided", "MsgRate")
    metrics.record_split("east", "applied", "MsgRate", children=2)
    metrics.record_split("west", "failed", "Topics")
    metrics.record_offload("east", "applied", bytes_offloaded=512 * 1024 * 1024)
    metrics.record_offload("west", "already_running")
    metrics.observe_admin_request("east", "PUT", 204, 0.12)
    metrics.observe_admin_request("west", "PUT", 500, 0.8)
    loads = [
        BrokerLoad("east", "b0:8080", 60_000 * batch_id, 0.2 * batch_id, LoadSource.LOAD_REPORT),
        BrokerLoad("east", "b1:8080", 60_000 * batch_id, 0.1, LoadSource.BUNDLES),
    ]
    metrics.brokers.set_cluster("east", loads, None)
    metrics.record_move("east", ActionResult.APPLIED, sessions_moved=12)


# Outside CI a machine without prometheus skips; in CI (.ci/install-tools installs it) it fails.
needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None and os.environ.get("CI") != "true",
    reason="prometheus not installed (Debian package prometheus: .ci/install-tools)",
)


@pytest.mark.promtool
@needs_prometheus
def test_every_panel_query_returns_series_from_a_real_prometheus() -> None:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda cluster, namespace: BundleLimits())
    for cluster in ("east", "west"):
        metrics.register_cluster(cluster)
        metrics.set_cluster_reachable(cluster, True)
    metrics.set_breaker("west", True)
    metrics.set_mode("apply")
    with HealthServer(registry=registry, checks={}, host="127.0.0.1", port=0) as exporter:
        target = f"127.0.0.1:{exporter.port}"
        with PrometheusServer([target], scrape_interval_s=0.5) as prometheus:
            for batch_id in range(1, 4):
                feed(metrics, batch_id)
                prometheus.wait_for_scrapes(samples=2 * batch_id)
            overview = load(DASHBOARD_DIR / "overview.json")
            assert resolve_variables(prometheus, overview)["cluster"] == "east"
            drill = resolve_variables(prometheus, load(DASHBOARD_DIR / "bundle-drilldown.json"))
            assert drill["bundle"] in {"0x00000000_0x80000000", "0x80000000_0xffffffff",
                                       "0x00000000_0xffffffff"}  # fmt: skip
            assert len(dashboard_queries(overview, {})) >= 20
            problems = check_dashboards(prometheus, DASHBOARDS)
    assert problems == [], "\n".join(f"{p.source}: {p.expr}\n  -> {p.problem}" for p in problems)


@pytest.mark.promtool
@needs_prometheus
def test_the_check_flags_errors_and_empty_results() -> None:
    """The checker itself must be able to fail: a bad expression and an empty one."""
    registry = CollectorRegistry()
    BalancerMetrics(registry, limits=lambda c, n: None)
    with (
        HealthServer(registry=registry, checks={}) as exporter,
        PrometheusServer([f"127.0.0.1:{exporter.port}"], scrape_interval_s=0.5) as prom,
    ):
        prom.wait_for_scrapes(samples=1)
        problems = check_queries(
            prom,
            [
                ("ok", "pulsar_balancer_last_batch_timestamp_seconds"),
                ("syntax", "sum by (cluster (pulsar_balancer_splits_total)"),
                ("empty", "pulsar_balancer_bundle_msg_rate_in"),
            ],
        )
    assert [(p.source, p.problem == "no series") for p in problems] == [
        ("syntax", False),
        ("empty", True),
    ]
