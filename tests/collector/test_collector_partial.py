"""Issue 33: a cluster whose brokers could never be listed is polled through its admin URL,
which shows one broker's topics only. That read is partial: a gauge says so, and it does
not count as the cluster read (`counts.last_read_ms`, what `/readyz` `cluster_read:<name>`
follows) until a listing succeeds. And one function (`polling_plan`) decides what `run`,
`plan` and `collect` poll."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from balancer.app.config import load_config
from balancer.collector.admin import PolledCluster, listed_targets, polling_plan
from balancer.collector.ports import Fetched
from balancer.collector.service import Collector
from balancer.collector.targets import BrokerDirectory, Target
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.errors import ForbiddenError
from tests.collector.test_collector_envelopes import Sink
from tests.collector.test_collector_faults import START_MS, FakeClock, answer

PARTIAL = "pulsar_balancer_collector_cluster_partial"


def test_the_admin_url_fallback_is_a_partial_read_until_a_listing_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listings: list[Sequence[str] | None] = [None, None, ["http://b1:8080", "http://b2:8080"]]

    def lister() -> Sequence[str]:
        urls = listings.pop(0)
        if urls is None:
            raise ForbiddenError("403", status=403)
        return urls

    def fetch(target: Target) -> Fetched:
        return answer("east", 1)

    clock = FakeClock()
    registry = CollectorRegistry()
    collector = Collector(
        targets=[Target("east")],
        fetch=fetch,
        sink=Sink(),
        broker_listers={"east": lister},
        metrics=CollectorMetrics(registry),
        clock_ms=clock.ms,
    )
    collector.poll_once()
    # The admin URL answered, but it is one broker of the cluster: not the cluster read.
    assert collector.counts.broker_last_success_ms[("east", "admin")] == START_MS
    assert "east" not in collector.counts.last_read_ms
    assert collector.counts.partial == {"east": True}
    assert registry.get_sample_value(PARTIAL, {"cluster": "east"}) == 1
    assert any("partial" in r.getMessage() for r in caplog.records)
    clock.advance(60)
    collector.poll_once()
    assert "east" not in collector.counts.last_read_ms
    clock.advance(60)
    collector.poll_once()  # listed: every broker polled, the cluster is read in full
    assert collector.counts.last_read_ms["east"] == START_MS + 120_000
    assert collector.counts.partial == {"east": False}
    assert registry.get_sample_value(PARTIAL, {"cluster": "east"}) == 0


def test_a_cluster_given_its_brokers_is_never_partial() -> None:
    registry = CollectorRegistry()
    collector = Collector(
        targets=[Target("east", "http://b1:8080")],
        fetch=lambda t: answer("east", 1),
        sink=Sink(),
        metrics=CollectorMetrics(registry),
    )
    collector.poll_once()
    assert collector.counts.partial == {"east": False}
    assert registry.get_sample_value(PARTIAL, {"cluster": "east"}) == 0


class Lister:
    def __init__(self, brokers: dict[str, Sequence[str] | Exception]) -> None:
        self.brokers = brokers
        self.asked: list[str] = []

    def list_brokers(self, cluster: str) -> Sequence[str]:
        self.asked.append(cluster)
        listed = self.brokers[cluster]
        if isinstance(listed, Exception):
            raise listed
        return listed


def test_collect_config_without_brokers_lists_every_broker(tmp_path: Path) -> None:
    """`collect --config` builds its clusters from the config: one without `brokers:` is
    listed every round like `run`'s, not polled through its admin URL alone."""
    path = tmp_path / "balancer.yaml"
    clusters = [
        {"name": "east", "admin_url": "http://e:8080"},
        {"name": "west", "admin_url": "https://w:8443", "brokers": ["https://w1:8443"]},
    ]
    path.write_text(yaml.safe_dump({"clusters": clusters}))
    config = load_config(path)
    admin = Lister({"east": ["10.0.0.1:8080", "10.0.0.2:8080"]})
    targets, listers = polling_plan(config.clusters, admin)
    assert targets == [Target("east"), Target("west", "https://w1:8443")]
    assert set(listers) == {"east"}
    # Broker ids, not URLs made of them: the admin client finds where each one answers.
    assert list(listers["east"]()) == ["10.0.0.1:8080", "10.0.0.2:8080"]


def test_listed_targets_lists_once_and_names_the_clusters_it_could_not_list() -> None:
    """`plan`'s side of the one polling plan: brokers listed once, a cluster that cannot be
    listed named with its error instead of stopping the others."""
    admin = Lister({"east": ["10.0.0.1:8080"], "west": ForbiddenError("403", status=403)})
    clusters = [
        PolledCluster("east", "http://e:8080"),
        PolledCluster("west", "http://w:8080"),
        PolledCluster("south", "http://s:8080", ("http://s1:8080",)),
    ]
    targets, errors = listed_targets(clusters, admin)
    assert targets == [
        Target("east", broker_id="10.0.0.1:8080"),
        Target("south", "http://s1:8080"),
    ]
    assert list(errors) == ["west"] and isinstance(errors["west"], ForbiddenError)
    assert admin.asked == ["east", "west"]


def test_plan_and_the_collector_make_one_listing_the_same_targets() -> None:
    """`plan` (listed_targets) and the collector's rounds (BrokerDirectory) expand a listing
    alike: each broker once, sorted, trailing slashes dropped."""
    admin = Lister({"east": ["10.0.0.2:8080", "http://10.0.0.1:8080/", "10.0.0.2:8080"]})
    clusters = [PolledCluster("east", "http://e:8080")]
    planned, errors = listed_targets(clusters, admin)
    targets, listers = polling_plan(clusters, admin)
    directory = BrokerDirectory(targets, listers)
    directory.refresh("east")
    assert errors == {} and list(directory.targets("east")) == planned
    assert planned == [
        Target("east", broker_id="10.0.0.1:8080"),
        Target("east", broker_id="10.0.0.2:8080"),
    ]
