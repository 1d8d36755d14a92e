"""The stats collector's Prometheus counters, and the prefix every metric of ours carries.

Apart from the exporter so the `collect` command (a process of its own) can count what it
delivers without the balancer's bundle and decision metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "pulsar_balancer"


class CollectorMetrics:
    """The stats collector's counters: on the balancer's registry, or the `collect` command's.

    Counts are of events (an envelope carries several): `sent` acknowledged by Kafka, `failed`
    handed to the producer but not acknowledged, `dropped` never handed to a producer,
    `oversized` (per cluster) too large to send on their own (balancer.collector.service).
    """

    def __init__(self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.time):
        self._clock = clock
        reg = registry
        self._sent = Counter(
            f"{PREFIX}_collector_events_sent", "Collected events acknowledged by Kafka.",
            registry=reg,
        )  # fmt: skip
        self._failed = Counter(
            f"{PREFIX}_collector_events_failed",
            "Collected events handed to the producer that Kafka did not acknowledge.",
            registry=reg,
        )
        self._dropped = Counter(
            f"{PREFIX}_collector_events_dropped",
            "Collected events never handed to a producer (Kafka unreachable, producer rebuilding).",
            registry=reg,
        )
        self._oversized = Counter(
            f"{PREFIX}_collector_events_oversized",
            "Collected events not sent: larger than collector.envelope_max_bytes on their own.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._rebuilds = Counter(
            f"{PREFIX}_collector_producer_rebuilds",
            "Kafka producers the collector replaced after a fatal producer error.", registry=reg,
        )  # fmt: skip
        self._last_publish = Gauge(
            f"{PREFIX}_collector_last_publish_timestamp_seconds",
            "Wall-clock time of the collector's last acknowledged send (process start before one).",
            registry=reg,
        )
        self._last_publish.set(clock())

    def events_sent(self, count: int) -> None:
        if count > 0:
            self._sent.inc(count)
            self._last_publish.set(self._clock())

    def events_failed(self, count: int) -> None:
        if count > 0:
            self._failed.inc(count)

    def events_dropped(self, count: int) -> None:
        if count > 0:
            self._dropped.inc(count)

    def events_oversized(self, cluster: str, count: int) -> None:
        if count > 0:
            self._oversized.labels(cluster=cluster).inc(count)

    def record_collector_answer(
        self,
        cluster: str,
        *,
        skipped_namespaces: int = 0,
        no_data: bool = False,
        oversized_events: int = 0,
    ) -> None:
        """The `collect` command's view of an answer: only what these counters hold."""
        self.events_oversized(cluster, oversized_events)

    def producer_rebuilt(self) -> None:
        self._rebuilds.inc()
