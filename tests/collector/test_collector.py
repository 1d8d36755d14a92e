"""The collector against the simulated peer group (real HTTP on 127.0.0.1) into a real broker."""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.cli import main as cli_main
from balancer.app.commands.collect import _with_flags
from balancer.app.config import CollectorConfig
from balancer.collector.admin import admin_fetch
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.collector.targets import Target, targets_for
from balancer.core.arrow_envelope import is_arrow_envelope
from balancer.core.envelopes import EnvelopeFormat
from balancer.core.events import TopicStatsEvent, parse_message
from balancer.core.round_marker import MARKER_KEY, is_round_marker
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, start_peer_group
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "default.yaml"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(SCENARIO, seed=7) as group:
        yield group


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peer_group(urls: dict[str, str]) -> PulsarPeerGroup:
    return PulsarPeerGroup(
        [ClusterEndpoint(n, u) for n, u in urls.items()],
        ClientSettings(
            retry=RetryPolicy(max_attempts=2, base_delay_s=0, max_delay_s=0), sleep=lambda s: None
        ),
    )


def _events(kafka: Broker, topic: str) -> list[tuple[bytes, TopicStatsEvent]]:
    out = []
    for record in kafka.read_all(topic):
        if is_round_marker(record.value):
            continue  # `collect` ends each round with one (collector.round_markers)
        for result in parse_message(record.value):
            assert isinstance(result, TopicStatsEvent), result
            out.append((record.key, result))
    return out


def _expected_topics(sim: RunningPeerGroup) -> set[tuple[str, str]]:
    """(cluster, topic) of every topic the clusters' brokers report."""
    out = set()
    with _peer_group(sim.admin_urls) as pg:
        for cluster, brokers in sim.broker_urls.items():
            for url in brokers:
                out |= {(cluster, e.topic) for e in pg.broker_topic_stats(cluster, url)}
    return out


def test_every_broker_of_every_cluster_is_polled_into_kafka(
    sim: RunningPeerGroup, kafka: Broker
) -> None:
    topic = kafka.new_topic(partitions=2, prefix="collect")
    now = [sim.clock.now_ms()]
    sink = KafkaEventSink.connect(bootstrap_servers=[kafka.bootstrap_servers], topic=topic)
    with _peer_group(sim.admin_urls) as pg:
        collector = Collector(
            targets=targets_for(sim.broker_urls),
            fetch=admin_fetch(pg),
            sink=sink,
            clock_ms=lambda: now[0],
            envelope_max_events=1,  # one event per message, as other producers send them
        )
        assert collector.poll_once() == []
    sink.close()
    events = _events(kafka, topic)
    assert {(e.cluster, e.topic) for _, e in events} == _expected_topics(sim)
    assert all(key == e.topic.encode() for key, e in events)  # keyed by topic name
    assert {e.timestamp_ms for _, e in events} == {now[0]}
    assert all(e.broker and e.broker.startswith("127.0.0.1:") for _, e in events)
    assert collector.counts.events == len(events) and not collector.counts.failures


def test_a_down_cluster_is_counted_and_retried_without_stopping_the_others(
    sim: RunningPeerGroup, kafka: Broker
) -> None:
    topic = kafka.new_topic(prefix="collect-down")
    urls = {**sim.admin_urls, "gone": f"http://127.0.0.1:{_closed_port()}"}
    clock = {"t": 0.0}
    sink = KafkaEventSink.connect(bootstrap_servers=[kafka.bootstrap_servers], topic=topic)

    def sleep(seconds: float) -> None:
        clock["t"] += seconds

    with _peer_group(urls) as pg:
        collector = Collector(
            targets=targets_for({name: [] for name in urls}),
            fetch=admin_fetch(pg),
            sink=sink,
            monotonic=lambda: clock["t"],
        )
        counts = collector.run(interval_s=60, retry_s=25, sleep=sleep, max_polls=2)
    sink.close()
    # Each 60 s round: the try at 0 s and retries at 25 s and 50 s (75 s is the next round's).
    assert counts.failures == {"gone": 6}
    assert clock["t"] == 60 + 50  # the last round does not wait for a third
    clusters = {e.cluster for _, e in _events(kafka, topic)}
    assert clusters == set(sim.admin_urls)


@pytest.mark.parametrize("envelope_format", ["arrow", "json"])
def test_batched_envelopes_carry_every_event(
    sim: RunningPeerGroup, kafka: Broker, envelope_format: EnvelopeFormat
) -> None:
    topic = kafka.new_topic(prefix=f"collect-env-{envelope_format}")
    sink = KafkaEventSink.connect(bootstrap_servers=[kafka.bootstrap_servers], topic=topic)
    with _peer_group(sim.admin_urls) as pg:
        collector = Collector(
            targets=targets_for(sim.broker_urls),
            fetch=admin_fetch(pg),
            sink=sink,
            envelope_max_events=50,
            envelope_format=envelope_format,
        )
        collector.poll_once()
    sink.close()
    records = kafka.read_all(topic)
    assert all(len(parse_message(r.value)) <= 50 for r in records)
    assert all(is_arrow_envelope(r.value) == (envelope_format == "arrow") for r in records)
    events = _events(kafka, topic)
    assert len(records) < len(events)
    assert {(e.cluster, e.topic) for _, e in events} == _expected_topics(sim)
    assert all(key == e.namespace.encode() for key, e in events)


@pytest.mark.parametrize(
    ("compression", "codec"), [("none", None), ("gzip", "gzip"), ("lz4", "lz4")]
)
def test_the_collector_compresses_as_configured(
    sim: RunningPeerGroup, kafka: Broker, compression: str, codec: str | None
) -> None:
    topic = kafka.new_topic(prefix=f"collect-{compression}")
    config = CollectorConfig(compression=compression)  # type: ignore[arg-type]
    sink = KafkaEventSink.connect(
        bootstrap_servers=[kafka.bootstrap_servers], topic=topic,
        compression_type=config.compression_type,
    )  # fmt: skip
    assert sink.producer is not None and sink.producer.config["compression_type"] == codec
    with _peer_group(sim.admin_urls) as pg:
        collector = Collector(
            targets=targets_for(sim.broker_urls), fetch=admin_fetch(pg), sink=sink
        )
        collector.poll_once()
    sink.close()
    events = _events(kafka, topic)  # kafka-python inflates what the broker kept
    assert {(e.cluster, e.topic) for _, e in events} == _expected_topics(sim)
    assert collector.counts.events == len(events) and not collector.counts.failures


def test_collect_command_polls_once_into_kafka(
    sim: RunningPeerGroup, kafka: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = kafka.new_topic(prefix="collect-cli")
    args = ["collect", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--polls", "1"]
    for name, url in sim.admin_urls.items():
        args += ["--admin-url", f"{name}={url}"]
    assert cli_main(args) == 0
    events = _events(kafka, topic)
    assert {e.cluster for _, e in events} == set(sim.admin_urls)
    # Envelopes by default (collector.envelope_max_events), keyed by namespace.
    records = kafka.read_all(topic)
    markers = [r for r in records if is_round_marker(r.value)]
    assert [r.key for r in markers] == [MARKER_KEY]  # its one round ends with its marker
    records = [r for r in records if r not in markers]
    assert len(records) < len(events)
    assert all(is_arrow_envelope(r.value) for r in records)  # collector.envelope_format
    assert all(len(parse_message(r.value)) <= 500 for r in records)
    assert all(key == e.namespace.encode() for key, e in events)
    err = capsys.readouterr().err
    assert "failed fetches: none" in err and "no data yet: none" in err
    # Like `run`, `collect` lists each cluster's brokers and polls every one; each reports
    # its V1 heartbeat namespace.
    skipped = ", ".join(f"{n}={len(sim.broker_urls[n])}" for n in sorted(sim.admin_urls))
    assert f"V1 and heartbeat namespaces skipped: {skipped}" in err


def test_collect_command_rejects_a_bad_admin_url(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["collect", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--admin-url", "nourl"]
    )
    assert code == 2
    assert "--admin-url 'nourl'" in capsys.readouterr().err


def test_collect_command_refuses_an_envelope_cap_under_one_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["collect", "--bootstrap", "127.0.0.1:1", "--topic", "t"]
    args += ["--admin-url", "a=http://127.0.0.1:1", "--envelope-max-bytes", "1000"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "envelope_max_bytes" in err and "4096" in err


@pytest.mark.parametrize(("flag", "codec"), [(None, "lz4"), ("gzip", "gzip"), ("none", None)])
def test_the_compression_flag_overrides_the_config(flag: str | None, codec: str | None) -> None:
    flags = argparse.Namespace(envelope=None, envelope_max_bytes=None, compression=flag)
    assert _with_flags(CollectorConfig(), flags).compression_type == codec


@pytest.mark.parametrize(("flag", "fmt"), [(None, "arrow"), ("json", "json"), ("arrow", "arrow")])
def test_the_envelope_format_flag_overrides_the_config(flag: str | None, fmt: str) -> None:
    flags = argparse.Namespace(envelope_format=flag)
    assert _with_flags(CollectorConfig(), flags).envelope_format == fmt
    with pytest.raises(ValueError, match="envelope_format"):
        _with_flags(CollectorConfig(), argparse.Namespace(envelope_format="avro"))


def test_target_broker_is_host_and_port() -> None:
    assert Target("a", "http://10.0.0.5:8080").broker == "10.0.0.5:8080"
    assert Target("a").broker is None


def test_a_malformed_topic_entry_is_dead_lettered_alone_and_the_rest_is_sent(
    kafka: Broker,
) -> None:
    # Issue 32: one topic with msgRateIn "NaN" hid the whole broker's answer for minutes.
    with start_peer_group(SCENARIO, seed=7) as group:
        east = group.broker_urls["east"][0]
        with _peer_group(group.admin_urls) as pg:
            healthy = {e.topic for e in pg.broker_topic_stats("east", east)}
        bad = sorted(healthy)[0]
        group.faults.configure(malformed_topics={bad: {"msgRateIn": "NaN"}})
        topic = kafka.new_topic(prefix="collect-nan")
        dead = kafka.new_topic(prefix="collect-nan-dlq")
        sink = KafkaEventSink.connect(
            bootstrap_servers=[kafka.bootstrap_servers], topic=topic, dead_letter_topic=dead
        )
        registry = CollectorRegistry()
        metrics = CollectorMetrics(registry)
        with _peer_group(group.admin_urls) as pg:
            collector = Collector(
                targets=[Target("east", east)],
                fetch=admin_fetch(pg),
                sink=sink,
                metrics=metrics,
                dead_letters=sink,
            )
            assert collector.poll_once() == []  # the answer counts as read
        sink.close()
    sent = {e.topic for _, e in _events(kafka, topic)}
    assert sent == healthy - {bad}
    assert collector.counts.rejected == {("east", "not_finite"): 1}
    assert (
        registry.get_sample_value(
            "pulsar_balancer_collector_rejected_entries_total",
            {"cluster": "east", "reason": "not_finite"},
        )
        == 1
    )
    [letter] = kafka.read_all(dead)
    headers = dict(letter.headers)
    assert headers["reason"] == b"not_finite" and headers["source"] == b"collector"
    assert b"msgRateIn" in headers["detail"] and b'"NaN"' in letter.value
    assert letter.key == f"collector/east/{Target('east', east).label}/{bad}".encode()


def test_collect_with_a_config_without_brokers_polls_every_broker(
    sim: RunningPeerGroup, kafka: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33: `collect --config` with no `brokers:` lists each cluster's brokers, as `run`
    and `plan` do (one polling plan), instead of polling the admin URL alone."""
    topic = kafka.new_topic(prefix="collect-config")
    config = tmp_path / "balancer.yaml"
    clusters = [{"name": n, "admin_url": u} for n, u in sim.admin_urls.items()]
    config.write_text(json.dumps({"clusters": clusters}))
    before = {c: sim.model.broker_requests(c, "broker_stats") for c in sim.broker_urls}
    args = ["collect", "--config", str(config), "--bootstrap", kafka.bootstrap_servers]
    assert cli_main([*args, "--topic", topic, "--polls", "1"]) == 0, capsys.readouterr().err
    for cluster, brokers in sim.broker_urls.items():
        after = sim.model.broker_requests(cluster, "broker_stats")
        asked = {b for b in range(len(brokers)) if after.get(b, 0) > before[cluster].get(b, 0)}
        assert asked == set(range(len(brokers))), cluster
