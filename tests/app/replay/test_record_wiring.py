"""`run`'s collector publishes its rounds' contexts to `kafka.context_topic` when it reads
load reports (moves on), and nothing when it does not (issue 44): the wiring, against the
simulator and the project's Kafka-protocol broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.collector_wiring import start_collector
from balancer.app.config import BalancerConfig
from balancer.core.context_record import decode_context
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.routing import ClusterEndpoint
from balancer.sim.group import RunningPeerGroup
from tests.kafka_broker import Broker
from tests.sim.broker_group import NS, one_namespace, started


@pytest.fixture
def group(request: pytest.FixtureRequest) -> Iterator[RunningPeerGroup]:
    with started(request, one_namespace("wiring", seed=5, topics=8)) as g:
        yield g


def config(tmp_path: Path, kafka: Broker, group: RunningPeerGroup) -> BalancerConfig:
    base = BalancerConfig.embedded_default(
        bootstrap_servers=[kafka.bootstrap_servers],
        clusters=[("a", group.admin_urls["a"])],
        state_dir=tmp_path,
    )
    topics = {
        "stats_topic": kafka.new_topic(1, "stats"),
        "context_topic": kafka.new_topic(1, "ctx"),
    }
    return base.model_copy(
        update={
            "kafka": base.kafka.model_copy(update=topics),
            "collector": base.collector.model_copy(update={"interval_s": 1.0}),
        }
    )


def run_rounds(cfg: BalancerConfig, group: RunningPeerGroup, *, load_reports: bool) -> int:
    """Run the collector for two whole rounds; returns the rounds it published contexts of."""
    stopped = threading.Event()
    with PulsarPeerGroup([ClusterEndpoint("a", group.admin_urls["a"])]) as admin:
        started_ = start_collector(
            cfg,
            admin,
            metrics=CollectorMetrics(CollectorRegistry()),
            broker_loads=None,
            load_reports=load_reports,
            stopped=stopped,
        )
        try:
            deadline = time.monotonic() + 30
            while started_.collector.counts.markers < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stopped.set()
            started_.thread.join(10)
            started_.sink.close()
        assert started_.collector.counts.markers >= 2
        assert not started_.collector.counts.context_failures
        return started_.collector.counts.contexts


def test_with_load_reports_each_round_publishes_its_context(
    tmp_path: Path, kafka: Broker, group: RunningPeerGroup
) -> None:
    cfg = config(tmp_path, kafka, group)
    published = run_rounds(cfg, group, load_reports=True)
    records = kafka.read_all(cfg.kafka.context_topic)
    assert published >= 2 and len(records) == published
    contexts = [decode_context(r.value) for r in records]
    assert all(
        r.key == b"a" and r.timestamp == c.round_ms for r, c in zip(records, contexts, strict=True)
    )
    rounds = [c.round_ms for c in contexts]
    assert rounds == sorted(set(rounds)) and all(ms % 1000 == 0 for ms in rounds)
    brokers = sorted(u.removeprefix("http://") for u in group.broker_urls["a"])
    for context in contexts:
        assert sorted(r.broker for r in context.reports) == brokers
        assert all(b.startswith(f"{NS}/") for r in context.reports for b in r.bundles)
        assert sum(len(r.bundles) for r in context.reports) == 4  # the namespace's bundles


def test_without_load_reports_nothing_is_published(
    tmp_path: Path, kafka: Broker, group: RunningPeerGroup
) -> None:
    cfg = config(tmp_path, kafka, group)
    assert run_rounds(cfg, group, load_reports=False) == 0
    assert kafka.read_all(cfg.kafka.context_topic, timeout_s=2) == []
    assert kafka.read_all(cfg.kafka.stats_topic)  # the stats went all the same
