"""Prometheus metrics of the balancer, on one explicit registry (never the global default).

Bundle load comes from the latest snapshot through a custom collector that builds the gauge
families on every scrape, so a bundle that was split simply disappears at the next snapshot:
no `.remove()` bookkeeping. Decisions, actions and pipeline health are ordinary counters,
gauges and histograms updated through the public `record_*` / `observe_*` / `set_*` methods.

Labels are cluster, namespace and bundle, never a topic (a million topics would flood
Prometheus); every other label takes values from a small closed set.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from balancer.core.decisions import SplitReason
from balancer.core.lease import LeaseStatus
from balancer.core.limits import BundleLimits, is_over, ratios
from balancer.core.load import BundleLoad
from balancer.core.moves.refusals import UnloadRefusal
from balancer.core.partitions import LoneHotTopic
from balancer.core.report import BatchReport
from balancer.core.results import (
    DECIDED,
    MOVE_RESULTS,
    OFFLOAD_RESULTS,
    SPLIT_RESULTS,
    ActionResult,
    Decided,
)
from balancer.core.split import SplitAlgorithm
from balancer.ops.broker_metrics import BrokerLoadFamilies
from balancer.ops.collector_metrics import PREFIX, CollectorMetrics
from balancer.ops.move_metrics import MovePathMetrics
from balancer.ops.status_families import (
    DrainMarksFamilies,
    TokenFileFamilies,
    WriterLeaseFamilies,
)

# (cluster, namespace) -> that namespace's limits, or None when none are known.
LimitsLookup = Callable[[str, str], BundleLimits | None]


# Span over which the share of late events is measured (readiness; the alert uses 10m too).
LATE_SHARE_SPAN_S = 600.0


@dataclass(frozen=True, slots=True)
class _Snapshot:
    bundles: tuple[BundleLoad, ...] = ()
    kafka_lag: tuple[tuple[int, int], ...] = ()


class _SnapshotCollector(Collector):
    """Yields the bundle and Kafka-lag gauges from the latest snapshot, fresh on every scrape."""

    def __init__(self, snapshot: Callable[[], _Snapshot], limits: LimitsLookup) -> None:
        self._snapshot = snapshot
        self._limits = limits

    def describe(self) -> Iterable[GaugeMetricFamily]:
        # Describing as empty families lets the registry check names without a snapshot.
        return list(self._families())

    def collect(self) -> Iterable[GaugeMetricFamily]:
        snap = self._snapshot()
        families = self._families()
        (rate_in, rate_out, tput_in, tput_out, topics, sessions, completeness, ratio, over, lag) = (
            families
        )
        for load in snap.bundles:
            key = [load.cluster, load.namespace, str(load.bundle)]
            rate_in.add_metric(key, load.msg_rate_in)
            rate_out.add_metric(key, load.msg_rate_out)
            tput_in.add_metric(key, load.msg_throughput_in)
            tput_out.add_metric(key, load.msg_throughput_out)
            topics.add_metric(key, load.topic_count)
            sessions.add_metric(key, load.session_count)
            completeness.add_metric(key, load.completeness)
            limits = self._limits(load.cluster, load.namespace)
            if limits is None:
                continue
            for limit, value in ratios(load, limits).items():
                ratio.add_metric([*key, limit.value], value)
            over.add_metric(key, 1.0 if is_over(load, limits) else 0.0)
        for partition, lag_records in snap.kafka_lag:
            lag.add_metric([str(partition)], lag_records)
        return families

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        labels = ["cluster", "namespace", "bundle"]

        def gauge(name: str, doc: str, extra: Sequence[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=[*labels, *extra])

        return (
            gauge("bundle_msg_rate_in", "Bundle messages/s in, averaged over the window."),
            gauge("bundle_msg_rate_out", "Bundle messages/s out, averaged over the window."),
            gauge("bundle_msg_throughput_in", "Bundle bytes/s in, averaged over the window."),
            gauge("bundle_msg_throughput_out", "Bundle bytes/s out, averaged over the window."),
            gauge("bundle_topics_count", "Topics of the bundle that reported in the window."),
            gauge("bundle_sessions_count", "Producers + consumers of the bundle."),
            gauge(
                "bundle_completeness_ratio",
                "Share of the bundle's known topics that reported in the window (0..1).",
            ),
            gauge(
                "bundle_threshold_ratio",
                "Bundle load divided by its split threshold, per limit (> 1 is over).",
                ["limit"],
            ),
            gauge("bundle_over_threshold", "1 when the bundle is over any split threshold."),
            GaugeMetricFamily(
                f"{PREFIX}_kafka_consumer_lag",
                "Records between the fetch high-water mark and the stream's position.",
                labels=["partition"],
            ),
        )


class BalancerMetrics:
    """The balancer's metrics on `registry`; one instance per process.

    `clock` returns wall-clock seconds (time.time); it stamps the last successful batch.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        limits: LimitsLookup,
        clock: Callable[[], float] = time.time,
        process_metrics: bool = True,
    ) -> None:
        self.registry = registry
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = _Snapshot()
        self._modes: set[str] = set()
        self._last_batch_end_s: float | None = None
        # (batch end, valid events, late events) of the batches in the last LATE_SHARE_SPAN_S.
        self._recent_events: deque[tuple[float, int, int]] = deque()
        reg = registry

        self._splits = Counter(
            f"{PREFIX}_splits", "Bundle split decisions and their outcome.",
            ["cluster", "result", "reason"], registry=reg,
        )  # fmt: skip
        self._split_children = Counter(
            f"{PREFIX}_split_children_created", "Child bundles created by applied splits.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._split_algorithm_refused = Counter(
            f"{PREFIX}_split_algorithm_refused",
            "Splits a broker refused with 412 because its supportedNamespaceBundleSplitAlgorithms "
            "lacks the algorithm sent.",
            ["cluster", "algorithm"], registry=reg,
        )  # fmt: skip
        self._offloads = Counter(
            f"{PREFIX}_offloads", "Topic offload actions and their outcome.",
            ["cluster", "result"], registry=reg,
        )  # fmt: skip
        self._offloaded_bytes = Counter(
            f"{PREFIX}_offloaded_bytes",
            "Bytes moved to tiered storage by offloads Pulsar reported done (SUCCESS).",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._moves = Counter(
            f"{PREFIX}_moves", "Bundle moves (unload to a chosen broker) and their outcome.",
            ["cluster", "result"], registry=reg,
        )  # fmt: skip
        self.move_path = MovePathMetrics(reg)
        self._moved_sessions = Counter(
            f"{PREFIX}_moved_sessions",
            "Producers + consumers reconnected by moves (applied or landed elsewhere).",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._pulsar_switch = Gauge(
            f"{PREFIX}_pulsar_switch_enabled",
            "1 while Pulsar's own shedder (switch=shedding) or auto-split (switch=auto_split) "
            "is on, as read from the broker's runtime configuration at start.",
            ["cluster", "switch"], registry=reg,
        )  # fmt: skip
        self._pulsar_config_errors = Counter(
            f"{PREFIX}_pulsar_config_errors",
            "Failed reads or writes of Pulsar's dynamic configuration (shedder check).",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._events_consumed = Counter(
            f"{PREFIX}_events_consumed", "Stats events read from Kafka (rejected included).",
            registry=reg,
        )  # fmt: skip
        self._events_rejected = Counter(
            f"{PREFIX}_events_rejected", "Stats events dead-lettered, by reason.",
            ["reason"], registry=reg,
        )  # fmt: skip
        self._offsets_skipped = Counter(
            f"{PREFIX}_kafka_offsets_skipped",
            "Stats-topic offsets a batch planned but could not read: reason partition_gone "
            "(the topic was recreated with fewer partitions) or records_lost (the broker no "
            "longer has them).",
            ["reason"], registry=reg,
        )  # fmt: skip
        for reason in ("partition_gone", "records_lost"):
            self._offsets_skipped.labels(reason=reason)
        self._events_late = Counter(
            f"{PREFIX}_events_late", "Stats events dropped behind the watermark.", registry=reg,
        )  # fmt: skip
        self._batch_duration = Histogram(
            f"{PREFIX}_batch_duration_seconds", "Micro-batch processing time.",
            buckets=(0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0), registry=reg,
        )  # fmt: skip
        self._input_rate = Gauge(
            f"{PREFIX}_input_events_per_second",
            "Events of the last batch divided by the time since the batch before.",
            registry=reg,
        )
        self._watermark_delay = Gauge(
            f"{PREFIX}_watermark_delay_seconds",
            "How far the event-time watermark trails the newest event.", registry=reg,
        )  # fmt: skip
        self._event_lag = Gauge(
            f"{PREFIX}_event_watermark_lag_seconds",
            "Newest event time read in the last batch with events minus the event-time "
            "watermark; below 0, even the newest event is late.", registry=reg,
        )  # fmt: skip
        self._last_batch = Gauge(
            f"{PREFIX}_last_batch_timestamp_seconds",
            "Wall-clock time of the last successful micro-batch (process start before one).",
            registry=reg,
        )
        self._last_batch_id = Gauge(
            f"{PREFIX}_last_batch_id", "Id of the last successful micro-batch.", registry=reg,
        )  # fmt: skip
        self._breaker = Gauge(
            f"{PREFIX}_circuit_breaker_open", "1 while the cluster's circuit breaker is open.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._mode = Gauge(
            f"{PREFIX}_controller_mode", "1 for the controller's current mode, 0 for the others.",
            ["mode"], registry=reg,
        )  # fmt: skip
        self._reachable = Gauge(
            f"{PREFIX}_cluster_reachable", "1 when the cluster's admin API answered last time.",
            ["cluster"], registry=reg,
        )  # fmt: skip
        self._controller_errors = Counter(
            f"{PREFIX}_controller_errors",
            "Batches whose controller step failed (nothing decided or applied for them; the "
            "log names the error).", registry=reg,
        )  # fmt: skip
        self._controller_errors_in_row = Gauge(
            f"{PREFIX}_controller_consecutive_errors",
            "Batches in a row whose controller step failed (0 after one that succeeded).",
            registry=reg,
        )  # fmt: skip
        self._admin_requests = Counter(
            f"{PREFIX}_admin_requests", "Pulsar admin requests by HTTP status ('error': none).",
            ["cluster", "method", "code"], registry=reg,
        )  # fmt: skip
        self._admin_duration = Histogram(
            f"{PREFIX}_admin_request_duration_seconds", "Pulsar admin request latency.",
            ["cluster", "method"], registry=reg,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )  # fmt: skip
        # Bounded: one series per topic alone over a bundle limit in the latest window.
        self._lone_hot = Gauge(
            f"{PREFIX}_lone_hot_topic_recommended_partitions",
            "Partitions that bring every partition of a topic alone over a bundle limit "
            "under the fill target (no split can help it).",
            ["cluster", "namespace", "topic"], registry=reg,
        )  # fmt: skip
        self._last_batch.set(clock())
        # Every collector counter, in the one class `collect --metrics-port` exports too (run
        # hands it to its Collector).
        self.collector = CollectorMetrics(reg, clock=clock)
        registry.register(_SnapshotCollector(self._current_snapshot, limits))
        # Broker loads and the move plans, per cluster (set by the move planner's caller).
        self.brokers = BrokerLoadFamilies()
        registry.register(self.brokers)
        if process_metrics:
            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)

    # -- bundle snapshot --------------------------------------------------------------------

    def _current_snapshot(self) -> _Snapshot:
        with self._lock:
            return self._snapshot

    def set_bundle_snapshot(self, bundles: Iterable[BundleLoad]) -> None:
        """Replace the bundle snapshot; bundles absent from it vanish from the next scrape.

        When a bundle appears more than once, the load with the latest window wins.
        """
        latest: dict[tuple[str, str, int, int], BundleLoad] = {}
        for load in bundles:
            key = (load.cluster, load.namespace, load.bundle.lower, load.bundle.upper)
            seen = latest.get(key)
            if seen is None or load.window_end_ms >= seen.window_end_ms:
                latest[key] = load
        with self._lock:
            self._snapshot = _Snapshot(tuple(latest.values()), self._snapshot.kafka_lag)

    # -- pipeline ---------------------------------------------------------------------------

    def observe_batch(self, report: BatchReport) -> None:
        """Record one successful micro-batch.

        A report with bundles replaces the bundle snapshot; a batch that brought no window
        (no bundles) keeps the previous one, since an idle batch is not a new snapshot.
        """
        now_s = self._clock()
        if report.bundles:
            self.set_bundle_snapshot(report.bundles)
        lag = tuple(sorted((int(p), max(0, int(v))) for p, v in report.kafka_lag.items()))
        with self._lock:
            self._snapshot = _Snapshot(self._snapshot.bundles, lag)
            previous_s = self._last_batch_end_s
            self._last_batch_end_s = now_s
        consumed = max(0, report.events_consumed)
        self._events_consumed.inc(consumed)
        for reason, count in report.events_rejected.items():
            if count > 0:
                self._events_rejected.labels(reason=reason).inc(count)
        self._events_late.inc(max(0, report.events_late))
        for reason, count in report.offsets_skipped.items():
            if count > 0:
                self._offsets_skipped.labels(reason=reason).inc(count)
        duration_s = max(0.0, report.duration_s)
        self._batch_duration.observe(duration_s)
        interval_s = now_s - previous_s if previous_s is not None else duration_s
        self._input_rate.set(consumed / interval_s if interval_s > 0 else 0.0)
        self._watermark_delay.set(max(0.0, report.watermark_delay_s))
        if report.newest_event_ms > 0 and report.watermark_ms > 0:
            self._event_lag.set((report.newest_event_ms - report.watermark_ms) / 1000)
        valid = max(0, consumed - sum(max(0, n) for n in report.events_rejected.values()))
        with self._lock:
            self._recent_events.append((now_s, valid, max(0, report.events_late)))
        self._last_batch.set(now_s)
        self._last_batch_id.set(report.batch_id)

    def late_event_share(self) -> float | None:
        """Late events / valid events over the last LATE_SHARE_SPAN_S; None with no event."""
        with self._lock:
            horizon_s = self._clock() - LATE_SHARE_SPAN_S
            recent = self._recent_events
            while recent and recent[0][0] < horizon_s:
                recent.popleft()
            valid = sum(v for _, v, _ in recent)
            late = sum(n for _, _, n in recent)
        return None if valid == 0 else min(1.0, late / valid)

    def last_batch_age_s(self) -> float | None:
        """Seconds since the last successful batch, or None before the first one."""
        with self._lock:
            last = self._last_batch_end_s
        return None if last is None else max(0.0, self._clock() - last)

    # -- decisions and actions -----------------------------------------------------------------

    def register_cluster(self, cluster: str) -> None:
        """Create the cluster's series at 0, so rates and alerts see them from the start."""
        for result in sorted(OFFLOAD_RESULTS):
            self._offloads.labels(cluster=cluster, result=result.value)
        # Bounded: results x Pulsar's reasons. Without these, the first failed split would
        # not show in increase() and the failure alerts would miss it.
        for label in (DECIDED, *sorted(SPLIT_RESULTS)):
            for reason in SplitReason:
                self._splits.labels(cluster=cluster, result=label, reason=reason.value)
        self._split_children.labels(cluster=cluster)
        self._split_algorithm_refused.labels(
            cluster=cluster, algorithm=SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value
        )
        self._offloaded_bytes.labels(cluster=cluster)
        for result in sorted(MOVE_RESULTS):
            self._moves.labels(cluster=cluster, result=result.value)
        self._moved_sessions.labels(cluster=cluster)
        self.move_path.register_cluster(cluster)
        self._pulsar_config_errors.labels(cluster=cluster)
        self._breaker.labels(cluster=cluster).set(0)
        self.collector.register_poll_cluster(cluster)

    def record_split(
        self, cluster: str, result: ActionResult | Decided, reason: str, children: int = 0
    ) -> None:
        """Count a split decision (`DECIDED`) or its result (one of `SPLIT_RESULTS`);
        `children` is the number of bundles an applied split created."""
        if result != DECIDED and ActionResult(result) not in SPLIT_RESULTS:
            raise ValueError(f"{result!r} is not a split result")  # a closed label set
        if children < 0:
            raise ValueError(f"children must be >= 0, got {children}")
        self._splits.labels(cluster=cluster, result=str(result), reason=reason).inc()
        if children and result == ActionResult.APPLIED:
            self._split_children.labels(cluster=cluster).inc(children)

    def record_split_algorithm_refused(self, cluster: str, algorithm: SplitAlgorithm) -> None:
        """A broker refused the split algorithm sent (412)."""
        algorithm = SplitAlgorithm(algorithm)  # ValueError outside the closed set
        self._split_algorithm_refused.labels(cluster=cluster, algorithm=algorithm.value).inc()

    def record_offload(self, cluster: str, result: ActionResult, bytes_offloaded: int = 0) -> None:
        """Count an offload's result (one of `OFFLOAD_RESULTS`); `bytes_offloaded` is what an
        applied offload moved."""
        if ActionResult(result) not in OFFLOAD_RESULTS:
            raise ValueError(f"{result!r} is not an offload result")  # a closed label set
        if bytes_offloaded < 0:
            raise ValueError(f"bytes_offloaded must be >= 0, got {bytes_offloaded}")
        self._offloads.labels(cluster=cluster, result=str(result)).inc()
        if bytes_offloaded and result == ActionResult.APPLIED:
            self._offloaded_bytes.labels(cluster=cluster).inc(bytes_offloaded)

    def record_move_refusal(self, cluster: str, refusal: UnloadRefusal) -> None:
        self.move_path.record_refusal(cluster, refusal)

    def record_move(self, cluster: str, result: ActionResult, sessions_moved: int = 0) -> None:
        """Count a move's result (one of `MOVE_RESULTS`) and the sessions it reconnected."""
        if ActionResult(result) not in MOVE_RESULTS:
            raise ValueError(f"{result!r} is not a move result")  # a closed label set
        self._moves.labels(cluster=cluster, result=str(result)).inc()
        if sessions_moved > 0:
            self._moved_sessions.labels(cluster=cluster).inc(sessions_moved)

    def set_pulsar_switch(self, cluster: str, switch: str, enabled: bool) -> None:
        """Pulsar's own shedder or auto-split (`switch`: shedding | auto_split) on or off."""
        if switch not in ("shedding", "auto_split"):
            raise ValueError(f"unknown Pulsar switch {switch!r}")  # a closed label set
        self._pulsar_switch.labels(cluster=cluster, switch=switch).set(1 if enabled else 0)

    def record_pulsar_config_error(self, cluster: str) -> None:
        self._pulsar_config_errors.labels(cluster=cluster).inc()

    def set_lone_hot_topics(self, topics: Iterable[LoneHotTopic]) -> None:
        """Replace the lone-hot-topic series with the latest window's (the others vanish)."""
        with self._lock:
            self._lone_hot.clear()
            for hot in topics:
                self._lone_hot.labels(hot.cluster, hot.namespace, hot.topic).set(
                    hot.recommended_partitions
                )

    def watch_writer_lease(self, status: Callable[[], LeaseStatus]) -> None:
        """Export the single-writer lease (`status()` is read at every scrape)."""
        self.registry.register(WriterLeaseFamilies(status))

    def watch_drain_marks(
        self, bad_records: Callable[[], int], read_failures: Callable[[], int]
    ) -> None:
        """Export the drain marks reader's counts (read at every scrape)."""
        self.registry.register(DrainMarksFamilies(bad_records, read_failures))

    def set_roll_in_progress(self, cluster: str, rolling: bool) -> None:
        """1 while the cluster's rollout record is open (`roll start`), else 0."""
        self.move_path.set_roll_in_progress(cluster, rolling)

    def set_breaker(self, cluster: str, open: bool) -> None:
        self._breaker.labels(cluster=cluster).set(1 if open else 0)

    def set_mode(self, mode: str) -> None:
        """Mark `mode` as the controller's current mode (every mode seen before drops to 0)."""
        mode = str(mode)
        self._modes.add(mode)
        for seen in self._modes:
            self._mode.labels(mode=seen).set(1 if seen == mode else 0)

    def watch_token_files(
        self, clusters: Sequence[str], problems: Callable[[], Mapping[str, str]]
    ) -> None:
        """Export `problems()` (cluster -> why its token file is unusable) as a gauge."""
        self.registry.register(TokenFileFamilies(clusters, problems))

    def record_controller_step(self, *, failed: bool) -> None:
        """One batch's controller step: a failure counts, a success ends a run of them."""
        if failed:
            self._controller_errors.inc()
            self._controller_errors_in_row.inc()
        else:
            self._controller_errors_in_row.set(0)

    def set_cluster_reachable(self, cluster: str, ok: bool) -> None:
        self._reachable.labels(cluster=cluster).set(1 if ok else 0)

    def observe_admin_request(
        self, cluster: str, method: str, status: int | None, duration_s: float
    ) -> None:
        """Count one admin request; `status` None means no HTTP answer (connect error, timeout)."""
        code = "error" if status is None else str(int(status))
        method = method.upper()
        self._admin_requests.labels(cluster=cluster, method=method, code=code).inc()
        self._admin_duration.labels(cluster=cluster, method=method).observe(max(0.0, duration_s))


def snapshot_family_names() -> Iterator[str]:
    """Names of the gauge families built from the snapshot (for docs and tests)."""
    for family in _SnapshotCollector._families():
        yield family.name
