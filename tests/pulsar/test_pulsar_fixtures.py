"""Parsers, collector and detector on Pulsar's real answer shapes (tests/fixtures/pulsar)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from balancer.app.commands.inspect import topic_loads
from balancer.collector.admin import admin_fetch
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.controller.offload_point import default_offload_point, ledger_sizes
from balancer.core.bundles import BundleRange
from balancer.core.decisions import SplitReason
from balancer.core.detect import DetectionSettings, DetectorState, detect
from balancer.core.events import TopicStatsEvent, parse_message
from balancer.core.limits import BundleLimits
from balancer.core.load import roll_up
from balancer.core.offload import bookkeeper_bytes
from balancer.core.thresholds import NamespacePolicy, Thresholds
from balancer.core.topics import TopicDomain
from balancer.pulsar.models import BrokerTopicStats, InternalStats, TopicStats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pulsar"
NS = "acme/orders"
HEARTBEAT = "pulsar/east/10.0.4.9:8080"
MIXED = BundleRange.parse("0x80000000_0xc0000000")  # a persistent and a non-persistent topic
LEDGER_BYTES = 268_435_456
GIB = 1024**3


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class ListSink:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        self.values.append(value)

    def flush(self) -> None:
        pass


class FixturePeerGroup:
    """`broker_topic_stats` answering with a fixture, as the admin client parses it."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def broker_topic_stats(self, cluster: str, broker_url: str | None = None) -> BrokerTopicStats:
        if self.body is None:
            return BrokerTopicStats.not_yet(cluster)
        return BrokerTopicStats.from_json(cluster, self.body)


def collect(body: Any) -> tuple[Collector, list[TopicStatsEvent]]:
    sink = ListSink()
    collector = Collector(
        targets=[Target("east")],
        fetch=admin_fetch(FixturePeerGroup(body)),
        sink=sink,
        clock_ms=lambda: 1_767_225_600_000,
    )
    failed = collector.poll_once()
    assert failed == []
    events = [e for v in sink.values for e in parse_message(v)]
    assert all(isinstance(e, TopicStatsEvent) for e in events), events
    return collector, [e for e in events if isinstance(e, TopicStatsEvent)]


def test_broker_stats_parse_with_the_v1_heartbeat_skipped() -> None:
    parsed = BrokerTopicStats.from_json("east", fixture("broker-stats-topics.json"))
    assert parsed.skipped_namespaces == (HEARTBEAT,)
    assert parsed.namespaces() == {NS}
    by_topic = {e.topic: e for e in parsed}
    assert len(by_topic) == 5
    assert by_topic["non-persistent://acme/orders/ticks"].domain is TopicDomain.NON_PERSISTENT
    assert by_topic["non-persistent://acme/orders/ticks"].stats.storage_size == 0
    # Publishers are hidden (exposePublisherStats=false): producerCount counts them.
    partition0 = by_topic[f"persistent://{NS}/orders-partition-0"].stats
    assert partition0.publisher_count == 3 and partition0.consumer_count == 2
    # Replication to the peer is part of msgRateOut, as PersistentTopic.updateRates adds it.
    assert partition0.msg_rate_out == pytest.approx(450 + 450 + 120)
    # No offloadedStorageSize in broker-stats: storageSize alone, offloaded ledgers included.
    archive = by_topic[f"persistent://{NS}/ledger-archive"].stats
    assert (archive.storage_size, archive.offloaded_storage_size) == (12 * GIB, 0)


def test_collector_sends_every_v2_topic_and_counts_the_heartbeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = fixture("broker-stats-topics.json")
    with caplog.at_level(logging.INFO, logger="balancer.collector.service"):
        collector, events = collect(body)
        collector.poll_once()  # the same key again: counted, not logged again
    assert {e.topic for e in events} == {
        f"persistent://{NS}/orders-partition-0",
        f"persistent://{NS}/orders-partition-4",
        f"persistent://{NS}/orders-partition-3",
        "non-persistent://acme/orders/ticks",
        f"persistent://{NS}/ledger-archive",
    }
    assert collector.counts.skipped_namespaces["east"] == 2
    assert collector.counts.failures["east"] == 0
    assert sum(HEARTBEAT in r.getMessage() for r in caplog.records) == 1
    ticks = next(e for e in events if e.topic.endswith("/ticks"))
    assert (ticks.producerCount, ticks.consumerCount) == (2, 1)


def test_an_empty_answer_is_no_data_yet_not_a_failure() -> None:
    collector, events = collect(None)
    assert events == []
    assert collector.counts.no_data["east"] == 1 and collector.counts.failures["east"] == 0
    assert "east" not in collector.counts.last_success_ms


def test_sessions_split_with_publishers_hidden() -> None:
    """Producers counted from producerCount put the bundle over the sessions limit."""
    _, events = collect(fixture("broker-stats-topics.json"))
    loads = tuple(t for t in topic_loads(events, namespace=NS) if MIXED.contains(t.position))
    bundle = roll_up(cluster="east", namespace=NS, bundle=MIXED, window_end_ms=60_000, topics=loads)
    assert bundle.session_count == (3 + 2) + (2 + 1)
    limits = BundleLimits(
        max_topics=1000, max_sessions=6, max_msg_rate=30_000, max_bandwidth_mbytes=100
    )
    result = detect(
        bundles=[bundle],
        window_end_ms=60_000,
        now_ms=60_000,
        thresholds=Thresholds(NamespacePolicy(limits=limits)),
        settings=DetectionSettings(hit_count_threshold=1),
        state=DetectorState(),
    )
    [split] = result.splits
    assert split.reasons == (SplitReason.SESSIONS,) and split.bundle == MIXED
    assert all(MIXED.strictly_inside(b) for b in split.boundaries)


def test_internal_stats_with_offloaded_ledgers() -> None:
    stats = InternalStats.from_json(fixture("internal-stats.json"))
    assert sum(lg.offloaded for lg in stats.ledgers) == 40
    kept = bookkeeper_bytes(ledger_sizes(stats), stats.current_ledger_size)
    assert kept == 8 * LEDGER_BYTES + stats.current_ledger_size
    # /stats of the same topic: storageSize - offloadedStorageSize is the same figure.
    topic = TopicStats.from_json(fixture("topic-stats.json"))
    assert topic.storage_size - topic.offloaded_storage_size == kept
    assert topic.storage_size == stats.total_size  # getTotalSize counts offloaded ledgers
    assert topic.publisher_count == 2  # no producerCount in /stats: its publishers list
    # Under a 3 GiB threshold nothing is offloaded again; under 1 GiB the oldest in BK go.
    assert default_offload_point(stats, 3 * GIB) is None
    point = default_offload_point(stats, 1 * GIB)
    assert point is not None and (point.ledger_id, point.entry_id) == (3345, 0)


HEARTBEAT_V2 = "pulsar/10.0.4.9:8080"


def test_broker_stats_parse_with_the_v2_heartbeat_skipped() -> None:
    """A broker with topicVersion=V2 reports its heartbeat as `pulsar/<host:port>`
    (NamespaceService.HEARTBEAT_NAMESPACE_FMT_V2): the broker's own health check, skipped
    like the V1 one, never user load."""
    parsed = BrokerTopicStats.from_json("east", fixture("broker-stats-topics-v2-heartbeat.json"))
    assert parsed.skipped_namespaces == (HEARTBEAT_V2,)
    assert parsed.namespaces() == {NS}
    assert len(parsed) == 5


def test_collector_counts_the_v2_heartbeat_like_the_v1() -> None:
    collector, events = collect(fixture("broker-stats-topics-v2-heartbeat.json"))
    assert all(not e.topic.startswith("persistent://pulsar/") for e in events)
    assert collector.counts.skipped_namespaces["east"] == 1


@pytest.mark.parametrize(
    "namespace",
    ["pulsar/orders", "pulsar/host-without-port", "pulsar/a:b", "acme/10.0.4.9:8080"],
)
def test_a_namespace_that_only_looks_like_a_heartbeat_is_kept(namespace: str) -> None:
    body = {namespace: fixture("broker-stats-topics.json")[NS]}
    body = json.loads(json.dumps(body).replace(f"://{NS}/", f"://{namespace}/"))
    parsed = BrokerTopicStats.from_json("east", body)
    assert parsed.skipped_namespaces == () and parsed.namespaces() == {namespace}


def test_offload_status_error_carries_pulsars_last_error() -> None:
    """A 204 only started the offload; its failure shows here: ERROR with lastError."""
    from balancer.controller.reconcile import follow_verdict
    from balancer.core.results import ActionResult
    from balancer.pulsar.models import MessageId, OffloadState, OffloadStatus

    status = OffloadStatus.from_json(fixture("offload-status-error.json"))
    assert status.state is OffloadState.ERROR and status.last_error == "NullLedgerOffloader"
    assert status.first_unoffloaded == MessageId(-1, -1, -1)  # MessageId.earliest
    stats = InternalStats.from_json(fixture("internal-stats.json"))
    point = MessageId(stats.ledgers[-1].ledger_id, 0)
    result, detail = follow_verdict(stats, status, point, age_s=5, follow_s=600)
    assert result is ActionResult.FAILED and "NullLedgerOffloader" in detail
