"""The collector sends Arrow envelopes by default (JSON ones when configured), never a
message over its byte cap, and counts (and logs once) the events too large to send."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from balancer.collector.ports import Fetch, Fetched
from balancer.collector.service import Collector
from balancer.collector.targets import Target
from balancer.core.arrow_envelope import is_arrow_envelope
from balancer.core.envelopes import DEFAULT_ENVELOPE_MAX_BYTES, EnvelopeFormat, record_bytes
from balancer.core.events import TopicStatsEvent, parse_message
from balancer.ops.collector_metrics import CollectorMetrics


@dataclass
class Sample:
    rate_in: float

    def to_event(
        self, *, cluster: str, topic: str, timestamp_ms: int, broker: str | None = None
    ) -> TopicStatsEvent:
        return TopicStatsEvent(
            cluster=cluster,
            topic=topic,
            timestamp_ms=timestamp_ms,
            msgRateIn=self.rate_in,
            msgRateOut=0.0,
            msgThroughputIn=0.0,
            msgThroughputOut=0.0,
            storageSize=0,
            backlogSize=0,
            offloadedStorageSize=0,
            producerCount=1,
            consumerCount=1,
            broker=broker,
        )


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, int]] = []

    def send(self, *, key: bytes, value: bytes, events: int = 1) -> None:
        self.sent.append((key, value, events))

    def flush(self) -> None:
        pass

    def events(self) -> list[TopicStatsEvent]:
        out = []
        for _, value, _ in self.sent:
            for parsed in parse_message(value):
                assert isinstance(parsed, TopicStatsEvent)
                out.append(parsed)
        return out


def topics(namespace: str, n: int) -> list[str]:
    return [f"persistent://{namespace}/topic-{i}" for i in range(n)]


def fetch_of(names: list[str]) -> Fetch:
    return lambda target: Fetched(samples=[(t, Sample(float(i))) for i, t in enumerate(names)])


def test_by_default_the_collector_sends_arrow_envelopes_of_500_keyed_by_namespace() -> None:
    names = topics("acme/orders", 1100) + topics("acme/audit", 7)
    sink = Sink()
    collector = Collector(targets=[Target("east")], fetch=fetch_of(names), sink=sink)
    assert collector.poll_once() == []
    assert [(k, n) for k, _, n in sink.sent] == [
        (b"acme/orders", 500),
        (b"acme/orders", 500),
        (b"acme/orders", 100),
        (b"acme/audit", 7),
    ]
    assert all(is_arrow_envelope(v) for _, v, _ in sink.sent)
    assert [e.topic for e in sink.events()] == names
    assert collector.counts.messages == 4 and collector.counts.events == len(names)
    assert all(record_bytes(k, v) <= DEFAULT_ENVELOPE_MAX_BYTES for k, v, _ in sink.sent)


class Varied:
    """A sample whose every field differs from the others' (what a broker reports)."""

    def __init__(self, i: int) -> None:
        self.i = i

    def to_event(
        self, *, cluster: str, topic: str, timestamp_ms: int, broker: str | None = None
    ) -> TopicStatsEvent:
        i = self.i
        return TopicStatsEvent(
            cluster=cluster,
            topic=topic,
            timestamp_ms=timestamp_ms,
            msgRateIn=i / 3,
            msgRateOut=1e-300 * i,
            msgThroughputIn=1e15 + i / 7,
            msgThroughputOut=0.1 * i,
            storageSize=2**62 + i,
            backlogSize=i * 1_000_003,
            offloadedStorageSize=i % 2,
            producerCount=i % 5,
            consumerCount=i,
            broker=broker,
        )


@pytest.mark.parametrize("envelope_format", ["arrow", "json"])
@pytest.mark.parametrize("envelope_max_events", [1, 7, 500])
def test_the_collectors_messages_decode_to_exactly_the_events_it_read(
    envelope_format: EnvelopeFormat, envelope_max_events: int
) -> None:
    names = [*topics("acme/orders", 40), "persistent://acme/uni/tópic-ü", *topics("b/x", 1)]
    sink = Sink()
    # A broker's own address (its events name it) and the admin URL (no broker: null).
    targets = [Target("east", "http://10.0.0.7:8080"), Target("west")]
    polled_ms = 1_767_225_600_123
    collector = Collector(
        targets=targets,
        fetch=lambda target: Fetched(samples=[(t, Varied(i)) for i, t in enumerate(names)]),
        sink=sink,
        clock_ms=lambda: polled_ms,
        envelope_max_events=envelope_max_events,
        envelope_format=envelope_format,
    )
    assert collector.poll_once() == []
    expected = {
        Varied(i).to_event(cluster=t.cluster, topic=name, timestamp_ms=polled_ms, broker=t.broker)
        for t in targets
        for i, name in enumerate(names)
    }
    got = sink.events()
    assert len(got) == len(expected) and set(got) == expected  # through parse_message
    enveloped = envelope_max_events > 1 and envelope_format == "arrow"
    assert all(is_arrow_envelope(v) == enveloped for _, v, _ in sink.sent)
    assert sum(n for _, _, n in sink.sent) == len(expected) == collector.counts.events


class Answers:
    def __init__(self) -> None:
        self.oversized: list[tuple[str, int]] = []

    def record_collector_answer(
        self,
        cluster: str,
        *,
        skipped_namespaces: int = 0,
        no_data: bool = False,
        oversized_events: int = 0,
        rejected_entries: Mapping[str, int] | None = None,
    ) -> None:
        self.oversized.append((cluster, oversized_events))

    def record_poll(self, cluster: str, broker: str, *, failure: str | None, at_s: float) -> None:
        pass  # polls are not what these tests look at

    def set_brokers(self, cluster: str, brokers: Sequence[str], *, partial: bool = False) -> None:
        pass


@pytest.mark.parametrize("envelope_format", ["arrow", "json"])
@pytest.mark.parametrize("envelope_max_events", [1, 500])
def test_an_event_too_large_for_a_message_is_counted_logged_once_and_not_sent(
    envelope_max_events: int, envelope_format: EnvelopeFormat, caplog: pytest.LogCaptureFixture
) -> None:
    long_name = "persistent://acme/orders/" + "x" * 5000
    names = [*topics("acme/orders", 3), long_name]
    sink = Sink()
    answers = Answers()
    collector = Collector(
        targets=[Target("east"), Target("west")],
        fetch=fetch_of(names),
        sink=sink,
        envelope_max_events=envelope_max_events,
        envelope_max_bytes=4096,
        envelope_format=envelope_format,
        metrics=answers,
    )
    with caplog.at_level(logging.WARNING, logger="balancer.collector.service"):
        collector.poll_once()
        collector.poll_once()
    assert all(record_bytes(k, v) <= 4096 for k, v, _ in sink.sent)
    assert long_name not in {e.topic for e in sink.events()}
    assert len(sink.events()) == 2 * 2 * 3  # two polls of two clusters, 3 small topics each
    assert collector.counts.oversized == {"east": 2, "west": 2}
    assert collector.counts.events == 12
    # Clusters are polled at once: their answers come in either order.
    assert sorted(answers.oversized) == [("east", 1)] * 2 + [("west", 1)] * 2
    warnings = [r.getMessage() for r in caplog.records if "envelope_max_bytes" in r.getMessage()]
    assert len(warnings) == 2  # once per (cluster, topic), not per poll
    assert all("x" * 100 in w and "4096" in w for w in warnings)


def test_oversized_events_are_a_metric_per_cluster() -> None:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    metrics.record_collector_answer("east", oversized_events=3)
    metrics.record_collector_answer("east", skipped_namespaces=1)
    value = registry.get_sample_value(
        "pulsar_balancer_collector_events_oversized_total", {"cluster": "east"}
    )
    assert value == 3


def test_a_cap_below_the_record_framing_is_refused() -> None:
    with pytest.raises(ValueError, match="envelope_max_bytes"):
        Collector(targets=[Target("east")], fetch=fetch_of([]), sink=Sink(), envelope_max_bytes=128)


def test_an_unknown_envelope_format_is_refused() -> None:
    with pytest.raises(ValueError, match="envelope_format"):
        Collector(
            targets=[Target("east")],
            fetch=fetch_of([]),
            sink=Sink(),
            envelope_format="avro",  # type: ignore[arg-type]
        )
