"""The single-writer lease on /metrics and /readyz: a standby is ready, and says who acts."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from balancer.core.lease import LeaseStatus
from balancer.ops.exporter import BalancerMetrics
from balancer.ops.health import HealthServer

HOLDER = LeaseStatus(held=True, holder="pod-a:7", detail="writer lease held", valid_for_s=20)
STANDBY = LeaseStatus(held=False, holder="pod-a:7", detail="standby: writer lease held by pod-a:7")
UNKNOWN = LeaseStatus(held=False, holder=None, detail="standby: writer lease not acquired yet")


def test_the_lease_gauges_follow_the_status_at_each_scrape() -> None:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, process_metrics=False)
    current = [HOLDER]
    metrics.watch_writer_lease(lambda: current[0])
    get = registry.get_sample_value
    assert get("pulsar_balancer_writer_lease_held") == 1
    assert get("pulsar_balancer_writer_lease_holder_info", {"holder": "pod-a:7"}) == 1
    current[0] = STANDBY
    assert get("pulsar_balancer_writer_lease_held") == 0
    assert get("pulsar_balancer_writer_lease_holder_info", {"holder": "pod-a:7"}) == 1
    current[0] = UNKNOWN  # holder unknown: no holder series at all
    assert get("pulsar_balancer_writer_lease_held") == 0
    assert get("pulsar_balancer_writer_lease_holder_info", {"holder": "pod-a:7"}) is None


def test_no_lease_is_a_split_and_offload_result() -> None:
    registry = CollectorRegistry()
    metrics = BalancerMetrics(registry, limits=lambda c, n: None, process_metrics=False)
    metrics.register_cluster("east")
    metrics.record_split("east", "no_lease", "MsgRate")
    metrics.record_offload("east", "no_lease")
    get = registry.get_sample_value
    labels = {"cluster": "east", "result": "no_lease", "reason": "MsgRate"}
    assert get("pulsar_balancer_splits_total", labels) == 1
    assert get("pulsar_balancer_offloads_total", {"cluster": "east", "result": "no_lease"}) == 1


def test_a_standby_is_ready_and_names_the_holder_in_the_body() -> None:
    current = [STANDBY]
    with HealthServer(
        registry=CollectorRegistry(),
        checks={"stream_running": lambda: True},
        info={"writer_lease": lambda: current[0].as_dict()},
    ) as server:
        answer = httpx.get(f"{server.url}/readyz", timeout=5)
        assert answer.status_code == 200
        body = answer.json()
        assert body["status"] == "ready" and body["failing"] == []
        assert body["writer_lease"] == {
            "role": "standby",
            "held": False,
            "holder": "pod-a:7",
            "detail": "standby: writer lease held by pod-a:7",
        }
        current[0] = HOLDER
        assert httpx.get(f"{server.url}/readyz", timeout=5).json()["writer_lease"]["role"] == (
            "holder"
        )


def test_an_info_provider_that_fails_shows_only_its_error_class() -> None:
    def broken() -> object:
        raise RuntimeError("token=secret")

    with HealthServer(
        registry=CollectorRegistry(), checks={"ok": lambda: True}, info={"writer_lease": broken}
    ) as server:
        answer = httpx.get(f"{server.url}/readyz", timeout=5)
    assert answer.status_code == 200  # information never decides readiness
    assert answer.json()["writer_lease"] == {"error": "RuntimeError"}
    assert "secret" not in answer.text
