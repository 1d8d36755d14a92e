"""The collector of `run`: its Kafka sink, what it polls and its thread; and the start-up
check of the broker URLs an operator configured (`clusters[].brokers`)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from balancer.app.config import BalancerConfig, ConfigError
from balancer.app.stream_settings import kafka_security
from balancer.collector.admin import BrokerUrlSource, admin_fetch, configure_brokers, polling_plan
from balancer.collector.load_health import LoadReportHealth
from balancer.collector.ports import BrokerLoadOut
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.pulsar.client import PulsarPeerGroup

log = logging.getLogger(__name__)


def check_configured_brokers(config: BalancerConfig, admin: BrokerUrlSource) -> None:
    """Reach each configured broker at its URL; ConfigError when one names no broker id."""
    problems = configure_brokers(config.clusters, admin)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"configured broker URLs that name no broker:\n{lines}")


def start_broker_url_report(config: BalancerConfig, admin: PulsarPeerGroup) -> threading.Thread:
    """In the background (a blackholed cluster must not hold up the start): list each
    cluster's brokers and find where each answers, so the log says at start, per broker,
    which URL answered or why none did (`balancer.pulsar.broker_addresses` logs each once).
    The collector's rounds do the same for brokers listed later."""

    def report() -> None:
        for cluster in config.clusters:
            if cluster.brokers:
                continue  # configured: reached as given
            try:
                brokers = admin.list_brokers(cluster.name)
            except Exception as exc:  # down at start: the collector's rounds list it again
                log.warning("brokers of %s not listed at start (%s)", cluster.name, exc)
                continue
            for broker in brokers:
                try:
                    admin.broker_url(cluster.name, broker)
                except Exception:  # already logged by the address book, with why
                    log.debug("broker %s of %s: no URL at start", broker, cluster.name)

    thread = threading.Thread(target=report, name="broker-urls", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True, slots=True)
class StartedCollector:
    collector: Collector
    sink: KafkaEventSink
    thread: threading.Thread


def start_collector(
    config: BalancerConfig,
    admin: PulsarPeerGroup,
    *,
    metrics: CollectorMetrics,
    broker_loads: BrokerLoadOut | None,
    load_reports: bool,
    stopped: threading.Event,
) -> StartedCollector:
    """Connect the sink and start polling in a thread (stops when `stopped` is set)."""
    sink = KafkaEventSink.connect(
        bootstrap_servers=config.kafka.bootstrap_servers,
        topic=config.kafka.stats_topic,
        client_kwargs=kafka_security(config).client_kwargs(),
        listener=metrics,
        max_message_bytes=config.collector.envelope_max_bytes,
        compression_type=config.collector.compression_type,
        # Malformed topic entries go where the stream's rejected events go.
        dead_letter_topic=config.kafka.dead_letter_topic,
        context_topic=config.kafka.context_topic,
    )
    # Brokers are listed at the start of every round, not once: a cluster down at start
    # or a broker added later is polled as soon as it answers.
    targets, listers = polling_plan(config.clusters, admin)
    collector = Collector(
        targets=targets,
        fetch=admin_fetch(
            admin,
            load_reports=load_reports,
            health=LoadReportHealth(metrics.load_report_failed),
        ),
        sink=sink,
        envelope_max_events=config.collector.envelope_max_events,
        envelope_max_bytes=config.collector.envelope_max_bytes,
        envelope_format=config.collector.envelope_format,
        metrics=metrics,
        dead_letters=sink,
        broker_listers=listers,
        max_parallel_per_cluster=config.collector.max_parallel_per_cluster,
        broker_loads=broker_loads,
        round_markers=config.collector.round_markers,
        # The load reports read each round, for a replay: only when they are read.
        contexts=sink if load_reports else None,
    )
    interval_s = config.collector.interval_s
    thread = threading.Thread(
        target=collector.run,
        kwargs={
            "interval_s": interval_s,
            "retry_s": min(10.0, interval_s / 2),
            "should_stop": stopped.is_set,
            "sleep": stopped.wait,
        },
        name="collector",
        daemon=True,
    )
    thread.start()
    return StartedCollector(collector, sink, thread)
