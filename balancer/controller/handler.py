"""The stream's BatchHandler: each closed window goes through detection, then the controller.

`handle(report)` is idempotent per batch_id: a batch already handled (this process or a
previous one, per the journal) is skipped; a batch replayed before it was marked handled
yields the same decision ids, which the journal recognises. Detection state (hit counts,
cooldowns) lives in memory: after a restart a bundle needs N fresh windows again, which
errs on the side of not acting.
"""

from __future__ import annotations

import logging
import threading

from balancer.controller.apply import Controller
from balancer.controller.bookkeeper import BookKeeperCheck
from balancer.controller.clock import Clock
from balancer.controller.layouts import LayoutCache
from balancer.controller.outcome import Outcome
from balancer.controller.stats import ControllerStats
from balancer.core.decisions import Decision
from balancer.core.detect import DetectionSettings, DetectorState, detect
from balancer.core.limits import is_near
from balancer.core.load import BundleLoad
from balancer.core.report import BatchReport
from balancer.core.thresholds import Thresholds

log = logging.getLogger(__name__)


class ControllerHandler:
    """Implements the stream's `BatchHandler` protocol on top of a `Controller`."""

    def __init__(
        self,
        controller: Controller,
        *,
        thresholds: Thresholds,
        detection: DetectionSettings,
        clock: Clock | None = None,
    ) -> None:
        self.controller = controller
        self.thresholds = thresholds
        self.detection = detection
        self.clock = clock or controller.clock
        self.state = DetectorState()
        # Topics at least this large are reported in `large_topics` (None: offload is off).
        self.offload_min_bytes: int | None = thresholds.min_offload_threshold_bytes()
        # broker-stats' storageSize counts offloaded ledgers: read what is in BookKeeper.
        self.bookkeeper = BookKeeperCheck(controller.admin)
        self.last_outcomes: tuple[Outcome, ...] = ()
        self._lock = threading.Lock()

    @property
    def stats(self) -> ControllerStats:
        return self.controller.stats

    @property
    def layouts(self) -> LayoutCache:
        """The stream's `LayoutProvider`: layouts as the controller last saw them."""
        return self.controller.layouts

    def wants_topics(self, bundle: BundleLoad) -> bool:
        """Per-topic loads are needed for bundles over a limit (to compute the split), and are
        fetched for those near one (`detection.topic_rows_min_load_ratio`)."""
        limits = self.thresholds.policy_for(bundle.namespace).limits
        return is_near(bundle, limits, self.detection.topic_rows_min_load_ratio)

    def handle(self, report: BatchReport) -> None:
        batch_id = str(report.batch_id)
        with self._lock:
            if self.controller.journal.has_unsettled():
                # Intents a crash (or an unexpected error) left open and actions sent without
                # an answer (`unknown`): checked each batch until Pulsar's state settles them.
                self.controller.reconcile()
            if self.controller.journal.batch_handled(batch_id):
                log.info("batch %s already handled: skipped", batch_id)
                self.stats.batch(replayed=True)
                return
            if report.window_end_ms <= 0:
                # No window closed in this batch: no evidence, and hit counts must not reset.
                self.controller.journal.mark_batch(batch_id, at_ms=self.clock.now_ms())
                self.stats.batch(replayed=False)
                self.last_outcomes = ()
                return
            large_topics = self.bookkeeper.fill(report.large_topics, self.thresholds)
            result = detect(
                bundles=report.bundles,
                large_topics=large_topics,
                window_end_ms=report.window_end_ms,
                now_ms=self.clock.now_ms(),
                thresholds=self.thresholds,
                settings=self.detection,
                state=self.state,
                bundle_counts=self.controller.known_bundle_counts(),
            )
            self.state = result.state
            for skipped in result.skipped:
                self.stats.count("split", "skipped", skipped.reason.value)
            decisions: list[Decision] = [*result.splits, *result.offloads]
            outcomes = [self.controller.handle(d, batch_id=batch_id) for d in decisions]
            self.last_outcomes = tuple(outcomes)
            self.controller.journal.mark_batch(batch_id, at_ms=self.clock.now_ms())
            self.stats.batch(replayed=False)

    def close(self) -> None:
        self.controller.close()
