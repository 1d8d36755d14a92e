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
from collections.abc import Sequence
from dataclasses import replace

from balancer.controller.apply import Controller
from balancer.controller.bookkeeper import BookKeeperCheck
from balancer.controller.clock import Clock
from balancer.controller.layouts import LayoutCache
from balancer.controller.move_planning import MovePlanner
from balancer.controller.outcome import AnyDecision, Outcome, kind_of
from balancer.controller.stats import ControllerStats
from balancer.core.decisions import SplitDecision
from balancer.core.detect import DetectionSettings, DetectorState, detect
from balancer.core.limits import is_near
from balancer.core.load import BundleLoad
from balancer.core.moves.model import MoveDecision, MovePlan
from balancer.core.report import BatchReport
from balancer.core.results import ActionResult
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
        batch_wait_s: float = 30.0,
        mover: MovePlanner | None = None,
    ) -> None:
        """`mover`: plans each window's bundle moves between brokers (None: no moves)."""
        if batch_wait_s <= 0:
            raise ValueError("batch_wait_s must be > 0")
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
        self.batch_wait_s = batch_wait_s
        self.mover = mover
        self.last_move_plans: dict[str, MovePlan] = {}  # cluster -> its newest window's
        self._busy: dict[str, threading.Thread] = {}  # cluster -> its actions' thread
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
            moves = self._plan_moves(report, result.splits)
            # Where a move plan was made, it counted each split's children on their parent's
            # broker and placed those that must go: the split must not unload them for
            # Pulsar to place elsewhere (their moves would find them gone: stale).
            splits = [
                replace(s, unload_children=False) if s.cluster in self.last_move_plans else s
                for s in result.splits
            ]
            decisions: list[AnyDecision] = [*splits, *result.offloads, *moves]
            self.last_outcomes = tuple(self._apply(decisions, batch_id))
            self.controller.journal.mark_batch(batch_id, at_ms=self.clock.now_ms())
            self.stats.batch(replayed=False)

    def _plan_moves(
        self, report: BatchReport, splits: Sequence[SplitDecision]
    ) -> list[MoveDecision]:
        """Each cluster's moves for the window (after its splits, whose children they may
        move). A cluster the planner cannot read gets none (logged, counted)."""
        if self.mover is None:
            return []
        by_cluster: dict[str, list[BundleLoad]] = {}
        for bundle in report.bundles:
            by_cluster.setdefault(bundle.cluster, []).append(bundle)
        moves: list[MoveDecision] = []
        for cluster in self.mover.board.clusters():
            try:
                plan = self.mover.plan(
                    cluster,
                    by_cluster.get(cluster, []),
                    window_end_ms=report.window_end_ms,
                    now_ms=self.clock.now_ms(),
                    splits=splits,
                )
            except Exception:  # a bug or a bad input must not stop splits and offloads
                log.exception("moves: planning cluster %s failed", cluster)
                self.stats.count("move", "skipped", "planning_failed")
                continue
            if plan is None:
                self.last_move_plans.pop(cluster, None)
                continue
            self.last_move_plans[cluster] = plan
            for blocked in plan.blocked:
                self.stats.count("move", "blocked", blocked.reason.value)
            moves.extend(plan.moves)
        return moves

    def _apply(self, decisions: list[AnyDecision], batch_id: str) -> list[Outcome]:
        """Apply each cluster's decisions in order, the clusters side by side.

        A cluster's admin calls may take the client's attempts x timeout each (minutes on a
        slow cluster); the others' must not wait for them. A batch waits at most
        `batch_wait_s` for a cluster; one still busy then goes on in the background (its
        intents are journaled, so a crash meanwhile is reconciled), and its decisions of
        the next batches are skipped (counted, logged) until it is done: the next windows
        decide them again.
        """
        by_cluster: dict[str, list[AnyDecision]] = {}
        for decision in decisions:
            by_cluster.setdefault(decision.cluster, []).append(decision)
        done: dict[str, list[Outcome]] = {}
        errors: list[Exception] = []  # of this batch's threads that end in its wait
        started: list[threading.Thread] = []
        for cluster, todo in by_cluster.items():
            busy = self._busy.get(cluster)
            if busy is not None and busy.is_alive():
                for decision in todo:
                    self.stats.count(kind_of(decision), "skipped", "cluster_busy")
                log.warning(
                    "batch %s: %d decision(s) on %s skipped: its actions of an earlier batch "
                    "still wait for its admin API",
                    batch_id,
                    len(todo),
                    cluster,
                )
                continue
            thread = threading.Thread(
                target=self._apply_cluster,
                args=(todo, batch_id, done, errors),
                name=f"controller-{cluster}",
                daemon=True,  # a hung admin call never holds up the process's exit
            )
            self._busy[cluster] = thread
            thread.start()
            started.append(thread)
        deadline = self.clock.monotonic() + self.batch_wait_s
        for thread in started:
            thread.join(timeout=max(0.0, deadline - self.clock.monotonic()))
        if errors:
            raise errors[0]
        return [o for d in decisions for o in done.get(d.decision_id, [])]

    def _apply_cluster(
        self,
        decisions: list[AnyDecision],
        batch_id: str,
        done: dict[str, list[Outcome]],
        errors: list[Exception],
    ) -> None:
        applied_splits: set[str] = set()
        try:
            for decision in decisions:
                if (
                    isinstance(decision, MoveDecision)
                    and decision.after_split is not None
                    and decision.after_split not in applied_splits
                ):
                    # The child exists only once its split is applied: next window decides.
                    self.stats.count(kind_of(decision), "skipped", "split_not_applied")
                    continue
                outcome = self.controller.handle(decision, batch_id=batch_id)
                done[decision.decision_id] = [outcome]
                if isinstance(decision, SplitDecision) and outcome.result == ActionResult.APPLIED:
                    applied_splits.add(decision.decision_id)
        except Exception as exc:  # raised by the batch if it still waits, and logged here
            log.exception("controller failed on %s in batch %s", decisions[0].cluster, batch_id)
            errors.append(exc)

    def close(self, *, wait_s: float = 10.0) -> None:
        """Close the controller after waiting (at most `wait_s`) for actions in flight.

        An action still waiting for its cluster then is cut off: its intent stays in the
        journal and is reconciled from Pulsar's state on the next start.
        """
        deadline = self.clock.monotonic() + wait_s
        for thread in list(self._busy.values()):
            thread.join(timeout=max(0.0, deadline - self.clock.monotonic()))
        self.controller.close()
