"""The balancer process: wires config, admin client, stream, controller, metrics and collector.

The one place where the adapters meet. `BalancerApp.start()` brings everything up in
dependency order, `stop()` takes it down in reverse; both are safe to call from a signal
handler's thread. Nothing here decides anything: the detector decides, the controller acts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from balancer.app.app_handler import AppHandler, LiveState
from balancer.app.collector_wiring import (
    check_configured_brokers,
    start_broker_url_report,
    start_collector,
)
from balancer.app.config import BalancerConfig
from balancer.app.controller_wiring import (
    broker_board,
    build_handler,
    start_pulsar_switch_checks,
)
from balancer.app.drain_wiring import DrainMarksView, drain_marks_view
from balancer.app.lease_wiring import build_writer_lease
from balancer.app.preflight import setting_error
from balancer.app.pulsar_wiring import peer_group_from_config
from balancer.app.stream_settings import stream_settings
from balancer.collector.service import Collector
from balancer.collector.sink import KafkaEventSink
from balancer.controller.layouts import LayoutCache
from balancer.controller.metrics_bridge import attach_metrics
from balancer.core.drain_marks import DrainMark, draining_brokers
from balancer.core.limits import BundleLimits
from balancer.core.rollout_record import RollProgress, roll_progress
from balancer.kafka.topics import ensure_topics
from balancer.ops.exporter import BalancerMetrics
from balancer.ops.health import HealthServer, standard_checks
from balancer.pulsar.client import PulsarPeerGroup
from balancer.pulsar.settings import ClientSettings
from balancer.pulsar.transport import RequestRecord
from streaming.spark.errors import root_cause

if TYPE_CHECKING:  # Spark is imported when the stream starts, not with the app
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from streaming.driver.deadletters import DeadLetterSink
    from streaming.spark.job import StreamSettings

log = logging.getLogger(__name__)

STATS_TOPIC_PARTITIONS = 4
CONTEXT_TOPIC_PARTITIONS = 1
_REFUSED = (401, 403)


class BalancerApp:
    """Everything of one balancer process; `start()` then `stop()`."""

    def __init__(
        self,
        config: BalancerConfig,
        *,
        loopback: bool = True,
        admin: PulsarPeerGroup | None = None,
    ) -> None:
        self.config = config
        self.loopback = loopback
        self.live = LiveState(hit_count_threshold=config.detection.hit_count_threshold)
        self.registry = CollectorRegistry()
        thresholds = config.thresholds_model()
        self._policy_limits: Callable[[str], BundleLimits] = lambda ns: (
            thresholds.policy_for(ns).limits
        )
        self.metrics = BalancerMetrics(
            self.registry, limits=lambda _cluster, ns: self._policy_limits(ns)
        )
        self.admin = admin or peer_group_from_config(
            config, ClientSettings(on_request=self._on_request)
        )
        # Several balancers on one peer group: only the lease's holder acts (None: alone).
        self.lease = build_writer_lease(config)
        if self.lease is not None:
            self.metrics.watch_writer_lease(self.lease.status)
        # What the collector saw of each broker, for the moves (None: moves are off).
        self.broker_board = broker_board(config)
        # Brokers marked draining (`pulsar-balancer drain`), read from Kafka by a watcher
        # that also applies the restart rule; made at start (it needs Kafka's credentials).
        self.drain_marks: DrainMarksView | None = None
        self.controller = build_handler(
            config,
            self.admin,
            lease=self.lease,
            board=self.broker_board,
            draining_of=self.draining_of,  # brokers marked by `pulsar-balancer drain`
            rollout_order_of=self.rollout_order_of,  # `pulsar-balancer roll start`
            roll_started_of=self.roll_started_of,
        )
        # The controller stores every layout it reads and each split's result, so the
        # stream maps topics to the children as soon as a split is applied.
        self.layouts: LayoutCache = self.controller.layouts
        self.handler = AppHandler(self.controller, self.metrics, self.live, self._policy_limits)
        attach_metrics(self.controller.controller, self.metrics)
        self.controller.controller.add_listener(self.handler.on_outcome)
        self.metrics.set_mode(config.controller.mode)
        for cluster in config.clusters:
            self.metrics.register_cluster(cluster.name)
        self.metrics.watch_token_files([c.name for c in config.clusters], self.admin.token_problems)
        self.health: HealthServer | None = None
        self.collector: Collector | None = None
        self._collector_sink: KafkaEventSink | None = None
        self._collector_thread: threading.Thread | None = None
        self._dead_letters: DeadLetterSink | None = None
        self.spark: SparkSession | None = None
        self.query: StreamingQuery | None = None
        self._cluster_ok: dict[str, bool] = {}
        self._started_wall_s = time.time()
        self._stopped = threading.Event()
        self._max_batch_age_s = max(120.0, 4.0 * config.spark.trigger_interval_s)

    # -- wiring helpers -------------------------------------------------------------
    def _lease_held(self) -> bool:
        """Whether this balancer may write (the restart rule's changes to the marks)."""
        return self.lease is None or self.lease.status().held

    def draining_of(self, cluster: str) -> frozenset[str]:
        """The move planner's `draining_of`: brokers of `cluster` marked draining."""
        marks = self.drain_marks
        return frozenset() if marks is None else marks.draining(cluster)

    def rollout_order_of(self, cluster: str) -> tuple[str, ...]:
        """The move planner's `rollout_order_of`: the order of a roll in progress, else ()."""
        marks = self.drain_marks
        return () if marks is None else marks.rollout_order(cluster)

    def roll_started_of(self, cluster: str) -> int | None:
        """When the cluster's last roll started, while its moves count (else None)."""
        marks = self.drain_marks
        grace_s = self.config.moves.grace_period_s
        return (
            None if marks is None else marks.roll_moves_count_since(cluster, grace_period_s=grace_s)
        )

    def _on_drain_marks(self, marks: tuple[DrainMark, ...]) -> None:
        clusters = {m.cluster for m in marks}
        draining = {c: tuple(sorted(draining_brokers(marks, c))) for c in clusters}
        rolling = self._rolls_in_progress(marks)
        with self.live.lock:
            self.live.draining = {c: b for c, b in draining.items() if b}
            self.live.rolling = rolling
        for cluster in self.config.clusters:
            self.metrics.set_roll_in_progress(cluster.name, cluster.name in rolling)

    def _rolls_in_progress(self, marks: tuple[DrainMark, ...]) -> dict[str, RollProgress]:
        """Each configured cluster's roll in progress, as the marks topic was last read."""
        view = self.drain_marks
        if view is None:
            return {}
        out = {}
        for cluster in self.config.clusters:
            rollout = view.marks.rollout(cluster.name)
            if rollout is not None and rollout.rolling:
                out[cluster.name] = roll_progress(rollout, marks)
        return out

    def _on_request(self, record: RequestRecord) -> None:
        self.metrics.observe_admin_request(
            record.cluster, record.method, record.status, record.duration_s
        )
        # 401/403: the cluster answers but refuses us, so nothing can be read or done there.
        reachable = record.status is not None and record.status < 500
        reachable = reachable and record.status not in _REFUSED
        if self._cluster_ok.get(record.cluster) != reachable:
            self._cluster_ok[record.cluster] = reachable
            self.metrics.set_cluster_reachable(record.cluster, reachable)

    def stream_settings(self) -> StreamSettings:
        return stream_settings(self.config, loopback=self.loopback)

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        from streaming.spark.checkpoint import check_watermark
        from streaming.spark.job import build_spark, dead_letter_sink, start_stream

        settings = self.stream_settings()
        # A configured broker URL that names no broker: refuse to start (every unload to it
        # would answer 409); each listed broker's URL is found by the collector's rounds.
        check_configured_brokers(self.config, self.admin)
        try:
            Path(settings.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise setting_error("spark.checkpoint_dir", settings.checkpoint_dir, exc) from None
        # A watermark far in the future makes every event late: refuse it, in one line.
        check_watermark(
            settings.checkpoint_dir,
            now_ms=int(time.time() * 1000),
            max_future_skew_ms=settings.max_future_skew_s * 1000,
        )
        ensure_topics(
            settings.bootstrap_servers,
            {
                settings.topic: STATS_TOPIC_PARTITIONS,
                settings.dead_letter_topic_name: 1,
                # Retention as the stats topic's (the broker's default, both created here):
                # a replay needs both over the same range. One partition: a few records a
                # round, read in round order.
                self.config.kafka.context_topic: CONTEXT_TOPIC_PARTITIONS,
            },
            client_kwargs=settings.security.client_kwargs(),
        )
        if self.lease is not None:  # joins in the background, while Spark starts
            self.lease.start()
        if self.broker_board is not None:  # moves off: nothing is drained
            self.drain_marks = drain_marks_view(
                self.config,
                self.admin,
                lease_held=self._lease_held,
                dry_run=self.config.controller.mode != "apply",
            )
            self.drain_marks.start(
                [c.name for c in self.config.clusters], on_marks=self._on_drain_marks
            )
            marks = self.drain_marks
            self.metrics.watch_drain_marks(
                lambda: marks.marks.bad_records, lambda: marks.read_failures
            )
        # Pulsar's own shedder moves our bundles again: warn (and switch off if told to), in
        # the background: a blackholed cluster must not hold up the start.
        start_pulsar_switch_checks(self.config, self.admin, self.metrics)
        start_broker_url_report(self.config, self.admin)
        checks = standard_checks(
            stream_running=self.stream_running,
            kafka_reachable=self.kafka_reachable,
            clusters_reachable=lambda: list(self._cluster_ok.values()),
            last_batch_age_s=self.metrics.last_batch_age_s,
            max_batch_age_s=self._max_batch_age_s,
            late_event_share=self.metrics.late_event_share,
        )
        checks["collector_publishing"] = self.collector_publishing
        checks["controller_ok"] = self.controller_ok
        for cluster in self.config.clusters:
            checks[f"cluster_read:{cluster.name}"] = self._cluster_read_check(cluster.name)
        self.health = HealthServer(
            registry=self.registry,
            checks=checks,
            # What only a restart cures: the stream ended, the collector's thread died.
            live_checks={
                "stream_alive": self.stream_alive,
                "collector_alive": self.collector_alive,
            },
            host=self.config.metrics.bind_address,
            port=self.config.metrics.port,
            info=self._readiness_info(),
        ).start()
        log.info("metrics on %s/metrics", self.health.url)
        self.collector = self._start_collector()
        self.spark = spark = build_spark(settings)
        spark.sparkContext.setLogLevel("ERROR")
        self._dead_letters = dead_letters = dead_letter_sink(settings)
        self.query = start_stream(
            spark, settings, self.handler, self.layouts, dead_letters=dead_letters
        )

    def _readiness_info(self) -> dict[str, Callable[[], object]]:
        """Shown in /readyz without deciding it: a standby is healthy, and says who acts."""
        lease = self.lease
        return {} if lease is None else {"writer_lease": lambda: lease.status().as_dict()}

    def _start_collector(self) -> Collector:
        started = start_collector(
            self.config,
            self.admin,
            metrics=self.metrics.collector,  # the one class `collect` exports too
            broker_loads=self.broker_board,
            load_reports=self._load_reports(),
            stopped=self._stopped,
        )
        self._collector_sink = started.sink
        self._collector_thread = started.thread
        return started.collector

    def _load_reports(self) -> bool:
        return self.config.moves.enabled and self.config.moves.read_load_reports

    def _cluster_read_check(self, cluster: str) -> Callable[[], bool]:
        """Some broker of `cluster` read within `collector.unread_intervals` intervals."""
        max_age_s = self.config.collector.unread_intervals * self.config.collector.interval_s

        def read_recently() -> bool:
            now_s = time.time()
            collector = self.collector
            last_ms = None if collector is None else collector.counts.last_read_ms.get(cluster)
            since_s = self._started_wall_s if last_ms is None else last_ms / 1000
            return now_s - since_s <= max_age_s

        return read_recently

    def controller_ok(self) -> bool:
        """Fewer than `controller.unready_after_errors` batches in a row failed to act."""
        with self.live.lock:
            failing = self.live.handler_errors_in_row
        return failing < self.config.controller.unready_after_errors

    def stream_running(self) -> bool:
        return self.query is not None and bool(self.query.isActive)

    def stream_alive(self) -> bool:
        """False once the stream ended on its own (an error): the process must restart."""
        return self.query is None or self._stopped.is_set() or bool(self.query.isActive)

    def collector_alive(self) -> bool:
        thread = self._collector_thread
        return thread is None or self._stopped.is_set() or thread.is_alive()

    def collector_publishing(self) -> bool:
        """The collector's last poll was delivered to Kafka in full."""
        return self._collector_sink is not None and self._collector_sink.publishing()

    def kafka_reachable(self) -> bool:
        # kafka-python's bootstrap_connected() is False once metadata is loaded, even while
        # producing works; the stream reading Kafka's high-water marks is the evidence.
        with self.live.lock:
            seen = self.live.kafka_seen_at_s
        return seen is not None and time.monotonic() - seen <= self._max_batch_age_s

    def stream_error(self) -> str | None:
        if self.query is None or self.query.isActive:
            return None
        error = self.query.exception()
        return None if error is None else root_cause(str(error))

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.lease is not None:  # first: no action starts now, a standby takes over
            _quietly("writer lease", self.lease.stop)
        if self.drain_marks is not None:
            _quietly("drain marks", self.drain_marks.stop)
        if self._collector_thread is not None:
            self._collector_thread.join(timeout=30)
        if self._collector_sink is not None:
            _quietly("collector", self._collector_sink.close)
        query = self.query
        if query is not None:
            _quietly("stream", lambda: self._stop_query(query))
        if self.spark is not None:
            _quietly("spark", self.spark.stop)
        if self._dead_letters is not None:
            _quietly("dead letters", self._dead_letters.close)
        _quietly("controller", self.controller.close)
        if self.health is not None:
            _quietly("health", self.health.stop)
        _quietly("admin client", self.admin.close)

    @staticmethod
    def _stop_query(query: StreamingQuery, *, grace_s: float = 30.0) -> None:
        """Let a running micro-batch finish (its actions are journaled), then stop.

        Stopping mid-batch is safe too (the batch is replayed on restart), but it cancels
        Spark jobs and fills the log with their errors.
        """
        deadline = time.monotonic() + grace_s
        while query.isActive and time.monotonic() < deadline:
            if not query.status.get("isTriggerActive", False):
                break
            time.sleep(0.2)
        query.stop()


def _quietly(name: str, step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:
        log.exception("stopping the %s failed", name)
