"""The collector reaches each listed broker at its registered URL (issue 41, point 2).

On a cluster whose brokers keep their plain port beside a TLS one, behind an https admin
URL, every broker is polled (at its webServiceUrlTls), its events carry its id (the plain
host:port every rule and unload names), the log says where each broker answered, and a
broker with no URL that answers is named and counted `no_broker_url`, never guessed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from balancer.collector.admin import admin_fetch, polling_plan
from balancer.collector.failures import PollFailure, classify
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.auth import TlsSettings
from balancer.pulsar.broker_addresses import BrokerUnreachableError, Unreachable
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.errors import UnavailableError
from balancer.pulsar.models import BrokerTopicStats
from balancer.pulsar.routing import ClusterEndpoint
from balancer.sim.group import RunningPeerGroup
from tests.collector.test_collector_envelopes import Sink
from tests.sim.broker_group import NS, one_namespace, started

POLL_FAILURES = "pulsar_balancer_collector_poll_failures_total"


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("tls", seed=9, topics=12, tls_web_port=True)) as g:
        yield g


@pytest.fixture
def admin(group: RunningPeerGroup) -> Iterator[PulsarPeerGroup]:
    assert group.tls_ca_file is not None
    tls = TlsSettings(ca_bundle=group.tls_ca_file)
    with PulsarPeerGroup([ClusterEndpoint("a", group.tls_admin_urls["a"], tls=tls)]) as pg:
        yield pg


def test_every_broker_is_polled_at_its_tls_url_and_named_by_its_id(
    group: RunningPeerGroup, admin: PulsarPeerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Sink()
    targets, listers = polling_plan([_Cluster("a", group.tls_admin_urls["a"])], admin)
    collector = Collector(
        targets=targets, fetch=admin_fetch(admin, load_reports=True), sink=sink,
        broker_listers=listers,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="balancer.pulsar"):
        failed = collector.poll_once()
    assert failed == []
    ids = sorted(u.removeprefix("http://") for u in group.broker_urls["a"])
    events = sink.events()
    assert sorted({e.broker for e in events if e.topic.startswith(f"persistent://{NS}/")}) <= ids
    assert len({e.topic for e in events}) == len(group.topics(NS))
    for plain, secure in zip(group.broker_urls["a"], group.broker_tls_urls["a"], strict=True):
        said = f"broker {plain.removeprefix('http://')} of a is reached at {secure} ("
        # (admin_url) for broker 0, the admin URL itself; (registered) for the others
        assert sum(m.startswith(said) for m in caplog.messages) == 1, caplog.messages


def test_a_broker_with_no_url_is_named_and_counted(
    group: RunningPeerGroup, admin: PulsarPeerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    ghost = Target("a", broker_id="127.0.0.1:1")
    collector = Collector(
        targets=[ghost], fetch=admin_fetch(admin), sink=Sink(), metrics=CollectorMetrics(registry)
    )
    with caplog.at_level(logging.WARNING, logger="balancer.pulsar"):
        assert collector.poll_once() == [ghost]
        collector.poll_once()
    labels = {"cluster": "a", "broker": "127.0.0.1:1", "reason": "no_broker_url"}
    assert registry.get_sample_value(POLL_FAILURES, labels) == 2
    named = [
        r.getMessage()
        for r in caplog.records
        if r.name == "balancer.pulsar"
        and "broker 127.0.0.1:1 of a is not an active" in r.getMessage()
    ]
    assert len(named) == 1  # once per change of state, not per round
    assert admin.broker_addresses.get("a", "127.0.0.1:1") is None


def test_classify_names_a_broker_without_url() -> None:
    exc = BrokerUnreachableError("x", broker="b:8080", why=Unreachable.NO_ANSWER, cause=None)
    assert classify(exc) is PollFailure.NO_BROKER_URL


class _Cluster:
    def __init__(self, name: str, admin_url: str) -> None:
        self.name, self.admin_url, self.brokers = name, admin_url, ()


class _MovedBroker:
    """A broker whose found URL stopped answering; looked up again, it answers elsewhere."""

    def __init__(self) -> None:
        self.urls = ["https://b1:8443", "https://b1:9443"]
        self.forgotten: list[tuple[str, str]] = []
        self.asked: list[str | None] = []

    def broker_url(self, cluster: str, broker: str) -> str:
        return self.urls[0]

    def forget_broker_url(self, cluster: str, broker: str) -> None:
        self.forgotten.append((cluster, broker))
        self.urls.pop(0)

    def broker_topic_stats(self, cluster: str, broker_url: str | None = None) -> Any:
        self.asked.append(broker_url)
        if broker_url == "https://b1:8443":
            raise UnavailableError("no answer", url=f"{broker_url}/admin/v2/broker-stats/topics")
        return BrokerTopicStats.from_json(cluster, {})

    def load_report(self, cluster: str, broker: str) -> Any:
        raise AssertionError("not asked")


def test_a_url_that_stops_answering_is_looked_up_again() -> None:
    source = _MovedBroker()
    fetch = admin_fetch(source)
    target = Target("a", broker_id="b1:8080")
    with pytest.raises(UnavailableError):
        fetch(target)
    assert source.forgotten == [("a", "b1:8080")]
    fetch(target)
    assert source.asked == ["https://b1:8443", "https://b1:9443"]
    configured = Target("a", "https://b1:8443")
    with pytest.raises(UnavailableError):
        fetch(configured)
    assert source.forgotten == [("a", "b1:8080")]  # a configured URL is kept as given
