"""`pulsar-balancer collect`: poll broker-stats of every cluster and send the events to Kafka.

With `--config FILE` the clusters (and their brokers), Kafka and the interval come from the
balancer config; flags override. Without it, give them as flags:

    pulsar-balancer collect --bootstrap 127.0.0.1:9092 --topic pulsar-topic-stats \
        --admin-url a=http://127.0.0.1:8080 --admin-url b=http://127.0.0.1:8081 --interval-s 60

With `--metrics-port` it serves the collector's metrics (events sent, failed, dropped) and
its health. It exits 1 when some events never reached Kafka.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from balancer.app.config import COMPRESSION_CODECS, CollectorConfig, format_errors
from balancer.collector.admin import (
    PolledCluster,
    admin_fetch,
    configure_brokers,
    polling_plan,
)
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.core.envelopes import ENVELOPE_FORMATS
from balancer.ops.collector_metrics import CollectorMetrics
from balancer.ops.health import HealthServer

if TYPE_CHECKING:
    from balancer.app.commands import Subparsers

NAME = "collect"
log = logging.getLogger(__name__)
_DEFAULTS = CollectorConfig()  # the config's defaults, the only ones


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        NAME,
        help="poll Pulsar broker-stats and send topic-stats events to Kafka",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, help="balancer YAML config")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers, host:port[,host:port]")
    parser.add_argument("--topic", help="Kafka topic of the stats events")
    parser.add_argument(
        "--admin-url",
        action="append",
        default=[],
        metavar="CLUSTER=URL",
        help="a cluster and its admin URL (repeat per cluster)",
    )
    parser.add_argument(
        "--broker-url",
        action="append",
        default=[],
        metavar="CLUSTER=URL",
        help="poll this broker of the cluster directly (repeat per broker; default: admin URL)",
    )
    parser.add_argument(
        "--dead-letter-topic",
        help="Kafka topic for malformed topic entries (default: kafka.dead_letter_topic with "
        "--config, else '<topic>-dead-letters', as the stream's)",
    )
    parser.add_argument("--interval-s", type=float, help="seconds between polls (default 60)")
    parser.add_argument("--retry-s", type=float, default=10.0, help="retry a failed cluster after")
    parser.add_argument(
        "--envelope",
        type=int,
        metavar="N",
        help="send up to N events per message (an envelope); 0 or 1: one JSON event each "
        f"(default: collector.envelope_max_events, {_DEFAULTS.envelope_max_events})",
    )
    parser.add_argument(
        "--envelope-max-bytes",
        type=int,
        metavar="BYTES",
        help="no message larger, Kafka's framing included (default: "
        f"collector.envelope_max_bytes, {_DEFAULTS.envelope_max_bytes})",
    )
    parser.add_argument(
        "--envelope-format",
        choices=ENVELOPE_FORMATS,
        help="an envelope as an Arrow IPC stream or as {'events': [...]} (default: "
        f"collector.envelope_format, {_DEFAULTS.envelope_format})",
    )
    parser.add_argument(
        "--compression",
        choices=COMPRESSION_CODECS,
        help="Kafka codec of the messages (default: collector.compression, "
        f"{_DEFAULTS.compression})",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics, /healthz and /readyz on PORT (0: any free port) of 127.0.0.1, "
        "or of metrics.bind_address with --config",
    )
    parser.add_argument("--polls", type=int, help="stop after this many polls")
    parser.add_argument("--duration-s", type=float, help="stop after this many seconds")
    parser.set_defaults(handler=run)


def _pairs(values: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"{what} {value!r}: expected CLUSTER=http(s)://host:port")
        out.append((name, url.rstrip("/")))
    return out


def _with_flags(config: CollectorConfig, args: argparse.Namespace) -> CollectorConfig:
    """The envelope and compression flags over the config, with the config's checks."""
    values = config.model_dump()
    flags = {
        "envelope": "envelope_max_events",
        "envelope_max_bytes": "envelope_max_bytes",
        "envelope_format": "envelope_format",
        "compression": "compression",
    }
    for flag, key in flags.items():
        if getattr(args, flag, None) is not None:
            values[key] = getattr(args, flag)
    try:
        return CollectorConfig.model_validate(values)
    except ValidationError as exc:
        raise ValueError(f"envelope flags:\n{format_errors(exc)}") from None


def run(args: argparse.Namespace) -> int:
    from balancer.kafka.security import KafkaSecurity
    from balancer.pulsar.client import PulsarPeerGroup
    from balancer.pulsar.routing import ClusterEndpoint

    admin_urls = _pairs(args.admin_url, "--admin-url")
    broker_urls = _pairs(args.broker_url, "--broker-url")
    security = KafkaSecurity()
    interval_s = args.interval_s
    collector_config = _DEFAULTS
    bind_address = "127.0.0.1"
    if args.config is not None:
        from balancer.app.config import load_config
        from balancer.app.preflight import check_environment
        from balancer.app.pulsar_wiring import peer_group_from_config
        from balancer.app.stream_settings import kafka_security

        config = load_config(args.config)
        check_environment(config, source=str(args.config), clients_only=True)
        peer_group = peer_group_from_config(config)
        bootstrap = args.bootstrap or ",".join(config.kafka.bootstrap_servers)
        topic = args.topic or config.kafka.stats_topic
        dead_letter_topic = args.dead_letter_topic or config.kafka.dead_letter_topic
        security = kafka_security(config)
        interval_s = interval_s or config.collector.interval_s
        collector_config = config.collector
        bind_address = config.metrics.bind_address
        clusters = {c.name: (c.admin_url, list(c.brokers)) for c in config.clusters}
    else:
        if not admin_urls or not args.bootstrap or not args.topic:
            raise ValueError("give --config, or --bootstrap, --topic and --admin-url")
        peer_group = PulsarPeerGroup([ClusterEndpoint(n, u) for n, u in admin_urls])
        bootstrap, topic = args.bootstrap, args.topic
        dead_letter_topic = args.dead_letter_topic or f"{topic}-dead-letters"
        clusters = {n: (u, []) for n, u in admin_urls}
    for name, url in broker_urls:
        if name not in clusters:
            raise ValueError(f"--broker-url {name}={url}: unknown cluster {name!r}")
        clusters[name][1].append(url)
    # As `run` polls: given brokers, else each cluster's brokers listed every round.
    polled = [PolledCluster(n, u, tuple(bs)) for n, (u, bs) in clusters.items()]
    problems = configure_brokers(polled, peer_group)
    if problems:
        raise ValueError("; ".join(problems))
    targets, listers = polling_plan(polled, peer_group)
    collector_config = _with_flags(collector_config, args)
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    sink = KafkaEventSink.connect(
        bootstrap_servers=bootstrap.split(","),
        topic=topic,
        client_kwargs=security.client_kwargs(),
        listener=metrics,
        max_message_bytes=collector_config.envelope_max_bytes,
        compression_type=collector_config.compression_type,
        dead_letter_topic=dead_letter_topic,
    )
    collector = Collector(
        targets=targets,
        fetch=admin_fetch(peer_group),
        sink=sink,
        envelope_max_events=collector_config.envelope_max_events,
        envelope_max_bytes=collector_config.envelope_max_bytes,
        envelope_format=collector_config.envelope_format,
        metrics=metrics,
        dead_letters=sink,
        broker_listers=listers,
        max_parallel_per_cluster=collector_config.max_parallel_per_cluster,
        round_markers=collector_config.round_markers,
    )
    for cluster in clusters:
        metrics.register_poll_cluster(cluster)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = None if args.duration_s is None else time.monotonic() + args.duration_s

    def sleep(seconds: float) -> None:
        if deadline is not None:
            seconds = min(seconds, deadline - time.monotonic())
        stop.wait(max(0.0, seconds))

    health = None
    if args.metrics_port is not None:
        health = HealthServer(
            registry=registry,
            checks={"collector_publishing": sink.publishing},
            host=bind_address,
            port=args.metrics_port,
        ).start()
        print(f"metrics: {health.url}/metrics", file=sys.stderr, flush=True)
    try:
        counts = collector.run(
            interval_s=interval_s or 60.0,
            retry_s=args.retry_s,
            should_stop=lambda: (
                stop.is_set() or (deadline is not None and time.monotonic() >= deadline)
            ),
            sleep=sleep,
            max_polls=args.polls,
        )
    finally:
        sink.close()
        peer_group.close()
        if health is not None:
            health.stop()

    def per_cluster(counter: Counter[str]) -> str:
        return ", ".join(f"{c}={n}" for c, n in sorted(counter.items()) if n) or "none"

    sent = sink.counts
    rejected: Counter[str] = Counter()
    for (cluster, _reason), n in counts.rejected.items():
        rejected[cluster] += n
    print(
        f"collected {counts.events} events in {counts.messages} messages over {counts.polls} "
        f"polls; failed fetches: {per_cluster(counts.failures)}; no data yet: "
        f"{per_cluster(counts.no_data)}; V1 and heartbeat namespaces skipped: "
        f"{per_cluster(counts.skipped_namespaces)}; too large to send: "
        f"{per_cluster(counts.oversized)}; topic entries rejected: {per_cluster(rejected)}; "
        f"events sent {sent.sent}, failed "
        f"{sent.failed}, dropped {sent.dropped}; producers rebuilt {sent.rebuilds}",
        file=sys.stderr,
    )
    # Events Kafka never took are lost (the next poll sends fresh stats): say so.
    return 1 if sent.failed or sent.dropped or counts.oversized.total() else 0
