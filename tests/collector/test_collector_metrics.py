"""The standalone collector (`collect --metrics-port`) exports every collector counter the
balancer's own exporter does (docs/pipeline.md: `pulsar_balancer_collector_*`), issue 33."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from balancer.ops.collector_metrics import CollectorMetrics
from balancer.ops.exporter import BalancerMetrics


def collector_families(registry: CollectorRegistry) -> set[str]:
    return {
        family.name
        for family in registry.collect()
        if family.name.startswith("pulsar_balancer_collector_")
    }


def test_collect_exports_every_collector_family_the_run_exports() -> None:
    run = CollectorRegistry()
    BalancerMetrics(run, limits=lambda c, n: None, process_metrics=False).register_cluster("east")
    standalone = CollectorRegistry()
    CollectorMetrics(standalone).register_poll_cluster("east")
    assert collector_families(run) == collector_families(standalone)


def test_collect_counts_skipped_namespaces_and_empty_answers() -> None:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    metrics.register_poll_cluster("east")
    labels = {"cluster": "east"}
    skipped = "pulsar_balancer_collector_skipped_namespaces_total"
    no_data = "pulsar_balancer_collector_no_data_total"
    assert registry.get_sample_value(skipped, labels) == 0  # from the first scrape
    assert registry.get_sample_value(no_data, labels) == 0
    metrics.record_collector_answer("east", skipped_namespaces=2, no_data=True)
    metrics.record_collector_answer("east", skipped_namespaces=1)
    assert registry.get_sample_value(skipped, labels) == 3
    assert registry.get_sample_value(no_data, labels) == 1


def test_context_publish_failures_are_counted_by_reason_each_from_the_first_scrape() -> None:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    name = "pulsar_balancer_collector_context_publish_failures_total"
    reasons = ("too_large", "send_failed", "not_delivered", "invalid_report")
    # Each reason at 0 from the start, so `increase()` sees the first failure.
    assert [registry.get_sample_value(name, {"reason": r}) for r in reasons] == [0, 0, 0, 0]
    metrics.context_publish_failed("too_large")
    metrics.context_publish_failed("too_large")
    metrics.context_publish_failed("send_failed")
    assert [registry.get_sample_value(name, {"reason": r}) for r in reasons] == [2, 1, 0, 0]
