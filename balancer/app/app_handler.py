"""What `run` does with each batch report: the live state the view and the summary read
(`LiveState`), and the handler that hands a batch to the controller (`AppHandler`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from balancer.controller.handler import ControllerHandler
from balancer.controller.outcome import Outcome
from balancer.core.broker_load import BrokerLoad
from balancer.core.bundles import BundleRange
from balancer.core.detect import windows_to_split
from balancer.core.limits import BundleLimits, is_over, max_ratio
from balancer.core.load import BundleLoad
from balancer.core.partitions import LoneHotTopic, lone_hot_topics
from balancer.core.report import BatchReport
from balancer.core.results import ActionResult
from balancer.core.rollout_record import RollProgress
from balancer.ops.exporter import BalancerMetrics

if TYPE_CHECKING:  # Spark is imported when the stream starts, not with the app
    pass

log = logging.getLogger(__name__)


# Outcomes the run summary needs (see LiveState.summary_outcomes), and how many are kept.
SUMMARY_RESULTS = frozenset(
    {
        ActionResult.APPLIED,
        ActionResult.LANDED_ELSEWHERE,
        ActionResult.STARTED,
        ActionResult.UNKNOWN,
    }
)
SUMMARY_OUTCOMES_KEPT = 10_000


@dataclass
class LiveState:
    """What the live view and the run summary show; updated by the batch handler."""

    started_at_s: float = field(default_factory=time.monotonic)
    batches: int = 0
    events_consumed: int = 0
    events_rejected: Counter[str] = field(default_factory=Counter)
    events_late: int = 0
    last_window_end_ms: int = 0
    last_batch_duration_s: float = 0.0
    kafka_lag: int = 0
    over_threshold: list[tuple[BundleLoad, float]] = field(default_factory=list)
    bundles_reporting: int = 0
    outcomes: deque[Outcome] = field(default_factory=lambda: deque(maxlen=200))  # live view
    # What the end-of-run summary lists (actions that did something, or whose fate is open),
    # kept apart from `outcomes`: a run's many rate-limited, duplicate and already-running
    # outcomes would push its early splits and moves out of a short deque.
    summary_outcomes: deque[Outcome] = field(
        default_factory=lambda: deque(maxlen=SUMMARY_OUTCOMES_KEPT)
    )
    handler_errors: int = 0
    handler_errors_in_row: int = 0  # batches in a row whose controller step raised
    kafka_seen_at_s: float | None = None  # monotonic time of the last batch that read Kafka
    # Topics alone over a bundle limit in the latest window, and every one seen this run
    # (latest figures per (cluster, topic)) for the summary.
    lone_hot_topics: list[LoneHotTopic] = field(default_factory=list)
    lone_hot_seen: dict[tuple[str, str], LoneHotTopic] = field(default_factory=dict)
    hit_count_threshold: int = 3  # consecutive windows over a limit before a split
    # Each cluster's broker loads in the newest window the handler planned moves for, as the
    # move planner read them (`MovePlanner.last_loads`), most loaded first.
    broker_loads: dict[str, list[BrokerLoad]] = field(default_factory=dict)
    # Of each bundle in `over_threshold`: how many more windows over its limit before a
    # split is decided (`balancer.core.detect.windows_to_split`; 0: decided or due).
    windows_to_split: dict[tuple[str, str, BundleRange], int] = field(default_factory=dict)
    # cluster -> brokers marked draining (`pulsar-balancer drain`), as last read
    draining: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # cluster -> its roll in progress (`pulsar-balancer roll start`), as last read
    rolling: dict[str, RollProgress] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def events_rejected_total(self) -> int:
        return sum(self.events_rejected.values())


class AppHandler:
    """The stream's BatchHandler: controller first, then metrics, layouts and the live view.

    A controller error is logged and counted, not raised: raising would stop the stream,
    and the next window decides again (every action is idempotent through the journal).
    """

    def __init__(
        self,
        controller: ControllerHandler,
        metrics: BalancerMetrics,
        live: LiveState,
        limits: Callable[[str], BundleLimits],
    ) -> None:
        self.controller = controller
        self.metrics = metrics
        self.live = live
        self.limits = limits
        # Thresholds are fixed for the life of the process, so this is read once.
        self.offload_min_bytes: int | None = controller.offload_min_bytes

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return self.controller.wants_topics(bundle)

    def handle(self, report: BatchReport) -> None:
        try:
            self.controller.handle(report)
        except Exception:
            log.exception(
                "controller failed on batch %s; the next window decides again", report.batch_id
            )
            self.metrics.record_controller_step(failed=True)
            with self.live.lock:
                self.live.handler_errors += 1
                self.live.handler_errors_in_row += 1
        else:
            self.metrics.record_controller_step(failed=False)
            with self.live.lock:
                self.live.handler_errors_in_row = 0
        self.metrics.observe_batch(report)
        lone: list[LoneHotTopic] = []
        if report.window_end_ms:
            lone = lone_hot_topics(
                report.bundles,
                limits_for=self.limits,
                fill_factor=self.controller.detection.fill_factor,
            )
            self.metrics.set_lone_hot_topics(lone)
        broker_loads = self._broker_loads()
        if report.window_end_ms and self.controller.mover is not None:
            # A cluster the planner skipped this window (no plan) keeps no broker series.
            for cluster in self.controller.mover.last_loads:
                self.metrics.brokers.set_cluster(
                    cluster,
                    broker_loads.get(cluster, ()),
                    self.controller.last_move_plans.get(cluster),
                )
                self.metrics.move_path.set_rules_unreadable(
                    cluster, cluster in self.controller.mover.unreadable_rules
                )
                progress = self.controller.mover.drain_progress
                self.metrics.move_path.set_drains(
                    cluster, progress.bundles_left(cluster), *progress.take_counts(cluster)
                )
        ranked = sorted(
            ((b, max_ratio(b, self.limits(b.namespace))) for b in report.bundles),
            key=lambda pair: -pair[1],
        )
        with self.live.lock:
            self.live.batches += 1
            self.live.events_consumed += report.events_consumed
            self.live.events_rejected.update(report.events_rejected)
            self.live.events_late += report.events_late
            self.live.last_batch_duration_s = report.duration_s
            self.live.kafka_lag = sum(report.kafka_lag.values())
            if report.kafka_lag:  # the source fetched high-water marks: Kafka answered
                self.live.kafka_seen_at_s = time.monotonic()
            if report.window_end_ms:
                self.live.broker_loads = broker_loads
                self.live.last_window_end_ms = report.window_end_ms
                self.live.bundles_reporting = len(report.bundles)
                self.live.over_threshold = [
                    (b, r) for b, r in ranked if is_over(b, self.limits(b.namespace))
                ][:8]
                state, detection = self.controller.state, self.controller.detection
                self.live.windows_to_split = {
                    key: windows_to_split(state, key, detection)
                    for key in (
                        (b.cluster, b.namespace, b.bundle) for b, _ in self.live.over_threshold
                    )
                }
                self.live.lone_hot_topics = lone
                for hot in lone:
                    self.live.lone_hot_seen[(hot.cluster, hot.topic)] = hot

    def _broker_loads(self) -> dict[str, list[BrokerLoad]]:
        """The move planner's newest loads of the clusters it planned this window (read, not
        recomputed); a cluster it skipped (no rules, no broker read) is left out."""
        mover = self.controller.mover
        if mover is None:
            return {}
        planned = set(self.controller.last_move_plans)
        return {
            cluster: sorted(loads.brokers, key=lambda b: (-b.load_ratio, b.broker))
            for cluster, loads in sorted(mover.last_loads.items())
            if cluster in planned
        }

    def on_outcome(self, outcome: Outcome) -> None:
        with self.live.lock:
            self.live.outcomes.append(outcome)
            if outcome.rechecked or outcome.result in SUMMARY_RESULTS:
                self.live.summary_outcomes.append(outcome)
