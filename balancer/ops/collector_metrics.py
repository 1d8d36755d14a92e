"""The stats collector's Prometheus counters, and the prefix every metric of ours carries.

Apart from the exporter so the `collect` command (a process of its own) can count what it
delivers without the balancer's bundle and decision metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily

from balancer.core.context_record import ContextPublishFailure

PREFIX = "pulsar_balancer"


class CollectorMetrics:
    """The stats collector's counters: on the balancer's registry, or the `collect` command's.

    Counts are of events (an envelope carries several): `sent` acknowledged by Kafka, `failed`
    handed to the producer but not acknowledged, `dropped` never handed to a producer,
    `oversized` (per cluster) too large to send on their own (balancer.collector.service).

    Answers: V1 namespace keys and heartbeats skipped, empty answers ("no data yet").

    Polls: failures by cluster, broker and reason (`balancer.collector.failures`), and the
    time of the last answer read per cluster and per broker polled now (a broker gone from
    its cluster's list vanishes from the next scrape).
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
        self._rejected = Counter(
            f"{PREFIX}_collector_rejected_entries",
            "Malformed topic entries left out of broker-stats answers (the rest of the answer "
            "is used) and sent to the dead-letter topic, by reason.",
            ["cluster", "reason"], registry=reg,
        )  # fmt: skip
        self._skipped = Counter(
            f"{PREFIX}_collector_skipped_namespaces",
            "V1 namespace keys and V2 heartbeats (a broker's heartbeat namespace) skipped in "
            "broker-stats answers.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._no_data = Counter(
            f"{PREFIX}_collector_no_data",
            "Empty broker-stats answers (a broker before its first stats update).",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._partial = Gauge(
            f"{PREFIX}_collector_cluster_partial",
            "1 while the cluster is polled through its admin URL alone because its brokers "
            "could never be listed: one broker's topics only; 0 once a listing succeeds.",
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
        self._poll_failures = Counter(
            f"{PREFIX}_collector_poll_failures",
            "Broker-stats polls that failed, by cluster, broker ('admin': the admin URL) and "
            "reason (unreachable, timeout, unauthorized, invalid_answer, server_error, other).",
            ["cluster", "broker", "reason"], registry=reg,
        )  # fmt: skip
        self._load_failures = Counter(
            f"{PREFIX}_load_report_failures",
            "Reads of a broker's load (its load report, or its load metrics under the "
            "extensible load manager) that failed, by cluster, broker and reason (none: the "
            "broker answers with no load to give; unreachable, timeout, unauthorized, "
            "invalid_answer, server_error, other). A cluster with a broker it cannot measure "
            "gets no moves.",
            ["cluster", "broker", "reason"], registry=reg,
        )  # fmt: skip
        self._unauthorized = Gauge(
            f"{PREFIX}_cluster_unauthorized",
            "1 while the cluster's last broker-stats poll was refused with 401 or 403 (the "
            "token is wrong, expired or lacks a role), 0 once an answer is read.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._context_failures = Counter(
            f"{PREFIX}_collector_context_publish_failures",
            "Context records (a round's broker load reports of one cluster, for a replay) the "
            "collector could not publish to kafka.context_topic, by reason (too_large, "
            "send_failed, not_delivered, invalid_report).",
            ["reason"], registry=reg,
        )  # fmt: skip
        for reason in ContextPublishFailure:  # each at 0: `increase()` sees the first failure
            self._context_failures.labels(reason=reason.value)
        self._reads_lock = threading.Lock()
        self._brokers: dict[str, tuple[str, ...]] = {}  # cluster -> broker labels polled now
        self._last_read_s: dict[tuple[str, str], float] = {}  # (cluster, broker) -> time
        self._started_s = clock()
        reg.register(_ReadsCollector(self._reads))

    def load_report_failed(self, cluster: str, broker: str, reason: str) -> None:
        self._load_failures.labels(cluster=cluster, broker=broker, reason=reason).inc()

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
        rejected_entries: Mapping[str, int] | None = None,
    ) -> None:
        """Count what one broker-stats answer held besides topic stats."""
        self.events_oversized(cluster, oversized_events)
        self.entries_rejected(cluster, rejected_entries or {})
        if skipped_namespaces:
            self._skipped.labels(cluster=cluster).inc(skipped_namespaces)
        if no_data:
            self._no_data.labels(cluster=cluster).inc()

    def entries_rejected(self, cluster: str, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            if count > 0:
                self._rejected.labels(cluster=cluster, reason=reason).inc(count)

    def context_publish_failed(self, reason: str) -> None:
        self._context_failures.labels(reason=reason).inc()

    def producer_rebuilt(self) -> None:
        self._rebuilds.inc()

    def record_poll(self, cluster: str, broker: str, *, failure: str | None, at_s: float) -> None:
        """One broker's poll: read (`failure` None) or failed for `failure`."""
        if failure is not None:
            self._poll_failures.labels(cluster=cluster, broker=broker, reason=failure).inc()
            if failure == "unauthorized":
                self._unauthorized.labels(cluster=cluster).set(1)
            return
        self._unauthorized.labels(cluster=cluster).set(0)
        with self._reads_lock:
            key = (cluster, broker)
            self._last_read_s[key] = max(at_s, self._last_read_s.get(key, 0.0))
            self._brokers.setdefault(cluster, ())
            if broker not in self._brokers[cluster]:
                self._brokers[cluster] = (*self._brokers[cluster], broker)

    def set_brokers(self, cluster: str, brokers: Sequence[str], *, partial: bool = False) -> None:
        """The brokers of `cluster` polled now; a broker no longer among them vanishes.
        `partial`: polled through the admin URL alone, its brokers never listed."""
        self._partial.labels(cluster=cluster).set(1 if partial else 0)
        with self._reads_lock:
            self._brokers[cluster] = tuple(brokers)
            for key in [k for k in self._last_read_s if k[0] == cluster]:
                if key[1] not in brokers:
                    del self._last_read_s[key]

    def register_poll_cluster(self, cluster: str) -> None:
        """Show `cluster` (never read yet: last read = process start) from the first scrape."""
        self._unauthorized.labels(cluster=cluster).set(0)
        self._skipped.labels(cluster=cluster)
        self._no_data.labels(cluster=cluster)
        self._partial.labels(cluster=cluster).set(0)
        with self._reads_lock:
            self._brokers.setdefault(cluster, ())

    def _reads(self) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
        """(cluster -> last read, (cluster, broker) -> last read); the start time if never."""
        with self._reads_lock:
            brokers = {
                (c, b): self._last_read_s.get((c, b), self._started_s)
                for c, labels in self._brokers.items()
                for b in labels
            }
            clusters = {
                c: max([self._started_s, *(t for (k, _), t in self._last_read_s.items() if k == c)])
                for c in self._brokers
            }
        return clusters, brokers


class _ReadsCollector:
    """The last-read gauges, made fresh from the collector's state on every scrape."""

    def __init__(
        self, reads: Callable[[], tuple[dict[str, float], dict[tuple[str, str], float]]]
    ) -> None:
        self._reads = reads

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        clusters, brokers = self._reads()
        cluster_family, broker_family = self._families()
        for cluster, at_s in sorted(clusters.items()):
            cluster_family.add_metric([cluster], at_s)
        for (cluster, broker), at_s in sorted(brokers.items()):
            broker_family.add_metric([cluster, broker], at_s)
        return cluster_family, broker_family

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}_collector_cluster_last_read_timestamp_seconds",
                "Poll time of the newest broker-stats answer read from the cluster (process "
                "start before one).",
                labels=["cluster"],
            ),
            GaugeMetricFamily(
                f"{PREFIX}_collector_broker_last_read_timestamp_seconds",
                "Poll time of the broker's newest broker-stats answer read (process start "
                "before one); only brokers polled now.",
                labels=["cluster", "broker"],
            ),
        )
