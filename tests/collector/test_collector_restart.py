"""The collector across a Kafka broker restart: a real tansu stopped and started on its port.

tansu keeps its data in memory, so a restart loses every producer id: kafka-python's
idempotent producer then fails InitProducerId fatally and never recovers by itself.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from balancer.collector.admin import admin_fetch
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.collector.targets import targets_for
from balancer.kafka.embedded import EmbeddedKafka, free_port
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.retry import RetryPolicy
from balancer.pulsar.routing import ClusterEndpoint
from balancer.pulsar.settings import ClientSettings
from balancer.sim import RunningPeerGroup, start_peer_group
from tests.kafka_broker import Broker

pytestmark = pytest.mark.kafka

SCENARIO = Path(__file__).resolve().parents[2] / "conf" / "scenarios" / "default.yaml"
TOPIC = "stats-restart"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningPeerGroup]:
    with start_peer_group(SCENARIO, seed=11) as group:
        yield group


def _wait_until(
    condition: Callable[[], bool], *, timeout_s: float, step: Callable[[], None], what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step()
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _metric(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(f"pulsar_balancer_collector_{name}")
    assert value is not None, name
    return value


def test_the_collector_rebuilds_its_producer_after_a_broker_restart(
    sim: RunningPeerGroup,
) -> None:
    port = free_port()
    broker = EmbeddedKafka.start(port=port)
    registry = CollectorRegistry()
    sink = KafkaEventSink.connect(
        bootstrap_servers=[broker.bootstrap_servers],
        topic=TOPIC,
        listener=CollectorMetrics(registry),
    )
    assert sink.idempotent  # the producer kind that cannot recover from the restart alone
    peers = PulsarPeerGroup(
        [ClusterEndpoint(n, u) for n, u in sim.admin_urls.items()],
        ClientSettings(
            retry=RetryPolicy(max_attempts=2, base_delay_s=0, max_delay_s=0),
            sleep=lambda s: None,
        ),
    )
    collector = Collector(targets=targets_for(sim.broker_urls), fetch=admin_fetch(peers), sink=sink)
    try:
        assert collector.poll_once() == []
        assert sink.publishing()
        sent_before = _metric(registry, "events_sent_total")
        assert sent_before == collector.counts.events > 0

        broker.stop()
        broker = EmbeddedKafka.start(port=port)  # same address, no data, no producer ids
        # The old producer fails its sends (fatal InitProducerId); the collector must put a
        # new producer in its place and deliver to the restarted broker.
        new_broker = Broker(broker.bootstrap_servers, "tansu", supports_list_offsets_latest=False)

        def poll() -> None:
            collector.poll_once()

        _wait_until(
            lambda: sink.counts.sent > sent_before and sink.publishing(),
            timeout_s=90,
            step=poll,
            what="events delivered after the restart",
        )
        assert new_broker.read_all(TOPIC), "nothing reached the restarted broker"
        assert _metric(registry, "producer_rebuilds_total") >= 1
        lost = _metric(registry, "events_failed_total") + _metric(registry, "events_dropped_total")
        assert lost > 0  # what the dead producer held is counted, not silently gone
        assert _metric(registry, "events_sent_total") == sink.counts.sent > sent_before
    finally:
        sink.close()
        peers.close()
        broker.stop()


def test_collect_command_serves_its_metrics_and_fails_when_kafka_is_gone(
    sim: RunningPeerGroup, tmp_path: Path
) -> None:
    """`collect --metrics-port`: /readyz names the collector; events lost make it exit 1."""
    import subprocess
    import sys

    broker = EmbeddedKafka.start()
    exe = Path(sys.executable).with_name("pulsar-balancer")
    args = [
        str(exe),
        "collect",
        "--bootstrap",
        broker.bootstrap_servers,
        "--topic",
        TOPIC,
        "--interval-s",
        "1",
        "--metrics-port",
        "0",
    ]
    for name, url in sim.admin_urls.items():
        args += ["--admin-url", f"{name}={url}"]
    log = tmp_path / "collect.log"
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = ""

        def find_url() -> None:
            nonlocal url
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("metrics: "):
                    url = line.split()[1].removesuffix("/metrics")

        _wait_until(lambda: bool(url), timeout_s=60, step=find_url, what="the metrics URL")
        ready = {"ok": False}

        def probe() -> None:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                    ready["ok"] = json.loads(response.read())["checks"]["collector_publishing"]
            except urllib.error.HTTPError:
                ready["ok"] = False

        _wait_until(lambda: ready["ok"], timeout_s=60, step=probe, what="collector_publishing")
        broker.stop()  # Kafka gone for good: the events of the next polls are lost

        def not_ready() -> bool:
            try:
                urllib.request.urlopen(f"{url}/readyz", timeout=5)
            except urllib.error.HTTPError as exc:
                body = json.loads(exc.read())
                return exc.code == 503 and body["failing"] == ["collector_publishing"]
            return False

        _wait_until(not_ready, timeout_s=90, step=lambda: None, what="/readyz failing")
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "pulsar_balancer_collector_events_sent_total" in text
        process.send_signal(2)  # Ctrl-C
        assert process.wait(timeout=60) == 1
        summary = log.read_text(errors="replace")
        assert "dropped" in summary and "events sent" in summary
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        broker.stop()


def test_an_oversize_message_is_dropped_and_counted_without_replacing_the_producer(
    kafka: Broker,
) -> None:
    topic = kafka.new_topic(prefix="collect-big")
    registry = CollectorRegistry()
    sink = KafkaEventSink.connect(
        bootstrap_servers=[kafka.bootstrap_servers],
        topic=topic,
        listener=CollectorMetrics(registry),
    )
    try:
        producer = sink.producer
        sink.send(key=b"ns", value=b"x" * (2 << 20), events=40)  # over max_request_size
        sink.send(key=b"ns", value=b'{"events": []}', events=3)
        sink.flush()
        assert sink.producer is producer  # the producer is fine: only the message was bad
        assert (sink.counts.sent, sink.counts.dropped, sink.counts.rebuilds) == (3, 40, 0)
        assert _metric(registry, "events_dropped_total") == 40
        assert not sink.publishing()  # a poll that lost events is not "publishing"
        assert [r.value for r in kafka.read_all(topic)] == [b'{"events": []}']
    finally:
        sink.close()
