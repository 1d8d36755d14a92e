"""The controller: turns split and offload decisions into admin calls, safely.

For every decision, in order: allow/deny list -> already handled (journal) -> dry-run ->
circuit breaker -> fresh check against Pulsar (bundle still there with the same range; offload
not running; the offload point) -> same action already done -> rate limit -> journal intent ->
the call -> journal outcome. Every decision ends in exactly one `Outcome`, written to the audit
log and counted in `stats`. A 404 or a changed layout is "stale", a 409 on offload is
"already_running": outcomes, not crashes, and never retried.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from balancer import offload
from balancer.bundles import NamespaceBundles, format_position
from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers, BreakerStatus
from balancer.controller.clock import Clock, SystemClock
from balancer.controller.journal import Journal
from balancer.controller.layouts import LayoutCache
from balancer.controller.limits import ActionLimits
from balancer.controller.ports import AdminPort
from balancer.controller.reconcile import reconcile_entry, split_done
from balancer.controller.stats import OFFLOAD_REASON, ActionResult, AppliedAction, ControllerStats
from balancer.decisions import Decision, DecisionKind, OffloadDecision, SplitDecision
from balancer.pulsar.errors import (
    ConflictError,
    NotFoundError,
    PulsarAdminError,
    ServerError,
    UnavailableError,
)
from balancer.pulsar.models import InternalStats, MessageId, OffloadState
from balancer.split import SplitAlgorithm

log = logging.getLogger(__name__)

Mode = Literal["dry-run", "apply"]
OffloadPointFn = Callable[[InternalStats, int], MessageId | None]


def ledger_sizes(stats: InternalStats) -> list[offload.LedgerSize]:
    """The admin client's ledgers as the core's offload rule takes them."""
    return [offload.LedgerSize(lg.ledger_id, lg.size, lg.offloaded) for lg in stats.ledgers]


def default_offload_point(stats: InternalStats, threshold_bytes: int) -> MessageId | None:
    """The foundation's size-threshold rule (`balancer.offload`) over the admin client's stats:
    the point comes from the bytes still in BookKeeper (offloaded ledgers count nothing)."""
    return offload.offload_point(ledger_sizes(stats), stats.current_ledger_size, threshold_bytes)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    mode: Mode = "dry-run"
    allow_namespaces: tuple[str, ...] = ("*",)
    deny_namespaces: tuple[str, ...] = ()
    unload_after_split: bool = True

    def allows(self, namespace: str) -> bool:
        """Allow-listed and not deny-listed (fnmatch globs over `tenant/namespace`)."""
        allowed = any(fnmatch.fnmatchcase(namespace, p) for p in self.allow_namespaces)
        denied = any(fnmatch.fnmatchcase(namespace, p) for p in self.deny_namespaces)
        return allowed and not denied


@dataclass(frozen=True, slots=True)
class Outcome:
    decision_id: str
    kind: DecisionKind
    cluster: str
    namespace: str
    result: ActionResult
    reason: str  # metric label: SplitReason spelling for splits, "Size" for offloads
    detail: str
    duration_s: float
    pulsar: dict[str, Any] = field(default_factory=dict)  # what Pulsar answered, for the audit
    children: int = 0  # bundles created by an applied split
    bytes_offloaded: int = 0  # bytes a triggered offload moves (closed ledgers before the point)
    # The decision itself, for listeners that report what was done (e.g. the run summary).
    decision: Any = field(default=None, compare=False, repr=False)


OutcomeListener = Callable[[Outcome], None]


@dataclass(frozen=True, slots=True)
class _Step:
    """How one decision ended, before it becomes an Outcome."""

    result: ActionResult
    detail: str
    pulsar: dict[str, Any] = field(default_factory=dict)
    children: int = 0
    bytes_offloaded: int = 0


class _Finish(Exception):
    """Ends a decision early with a result (control flow inside one decision, not an error)."""

    def __init__(self, result: ActionResult, detail: str, **pulsar: Any) -> None:
        super().__init__(detail)
        self.step = _Step(result, detail, pulsar)


def _error_info(exc: PulsarAdminError) -> dict[str, Any]:
    return {
        "error": type(exc).__name__,
        "status": exc.status,
        "reason": exc.reason,
        "method": exc.method,
        "url": exc.url,  # the client's URLs never carry credentials
        "attempts": exc.attempts,
    }


def split_action_key(decision: SplitDecision) -> str:
    points = ",".join(format_position(b) for b in decision.boundaries)
    return f"split|{decision.cluster}|{decision.namespace}|{decision.bundle}|{points}"


def offload_action_key(decision: OffloadDecision, point: MessageId) -> str:
    return f"offload|{decision.cluster}|{decision.topic}|{point.ledger_id}:{point.entry_id}"


class Controller:
    def __init__(
        self,
        admin: AdminPort,
        *,
        settings: ControllerSettings,
        journal: Journal,
        audit: AuditLog,
        limits: ActionLimits,
        breakers: Breakers,
        clock: Clock | None = None,
        stats: ControllerStats | None = None,
        offload_point: OffloadPointFn = default_offload_point,
        layouts: LayoutCache | None = None,
    ) -> None:
        self.admin = admin
        self.settings = settings
        self.journal = journal
        self.audit = audit
        self.limits = limits
        self.breakers = breakers
        self.clock = clock or SystemClock()
        self.stats = stats or ControllerStats()
        self._offload_point = offload_point
        # Every layout read is kept, so the stream maps topics to new children at once.
        self.layouts = layouts or LayoutCache(admin, clock=self.clock, breakers=breakers)
        self._listeners: list[OutcomeListener] = []
        self._lock = threading.Lock()  # one decision at a time: the journal order is the truth

    def add_listener(self, listener: OutcomeListener) -> None:
        """Call `listener(outcome)` after every decision (e.g. to feed the metrics exporter)."""
        self._listeners.append(listener)

    # -- read-only views ----------------------------------------------------------------------

    def breaker_states(self) -> dict[str, BreakerStatus]:
        return self.breakers.statuses()

    def known_bundle_counts(self) -> dict[tuple[str, str], int]:
        """Bundles per (cluster, namespace) as last read from Pulsar (for max_bundles)."""
        return self.layouts.bundle_counts()

    # -- decisions ----------------------------------------------------------------------------

    def handle(self, decision: Decision, *, batch_id: str | None = None) -> Outcome:
        if isinstance(decision, SplitDecision):
            return self.apply_split(decision, batch_id=batch_id)
        return self.apply_offload(decision, batch_id=batch_id)

    def apply_split(self, decision: SplitDecision, *, batch_id: str | None = None) -> Outcome:
        return self._run(decision, batch_id, decision.reason.value, self._split_steps)

    def apply_offload(self, decision: OffloadDecision, *, batch_id: str | None = None) -> Outcome:
        return self._run(decision, batch_id, OFFLOAD_REASON, self._offload_steps)

    def _run(
        self,
        decision: Any,
        batch_id: str | None,
        reason: str,
        steps: Callable[[Any, str | None], _Step],
    ) -> Outcome:
        started = self.clock.monotonic()
        with self._lock:
            try:
                self._gate(decision)
                step = steps(decision, batch_id)
            except _Finish as finish:
                step = finish.step
        outcome = Outcome(
            decision_id=decision.decision_id,
            kind=decision.kind,
            cluster=decision.cluster,
            namespace=decision.namespace,
            result=step.result,
            reason=reason,
            detail=step.detail,
            duration_s=self.clock.monotonic() - started,
            pulsar=step.pulsar,
            children=step.children,
            bytes_offloaded=step.bytes_offloaded,
            decision=decision,
        )
        self._report(decision, outcome, batch_id)
        for listener in self._listeners:
            try:
                listener(outcome)
            except Exception:  # a metrics bug must not stop the controller
                log.exception("outcome listener failed")
        return outcome

    def _gate(self, decision: SplitDecision | OffloadDecision) -> None:
        """The checks that need no call to Pulsar."""
        if not self.settings.allows(decision.namespace):
            raise _Finish(ActionResult.DENIED, "namespace outside the allow-list or deny-listed")
        known = self.journal.get(decision.decision_id)
        if known is not None:
            raise _Finish(
                ActionResult.DUPLICATE, f"decision already handled: {known.result or 'pending'}"
            )
        if self.settings.mode == "dry-run":
            raise _Finish(ActionResult.DRY_RUN, "dry-run: nothing touched")
        if not self.breakers.for_cluster(decision.cluster).allow():
            raise _Finish(
                ActionResult.BREAKER_OPEN, f"circuit breaker open for cluster {decision.cluster}"
            )

    def _call(
        self,
        cluster: str,
        what: str,
        fn: Callable[[], Any],
        *,
        on_conflict: ActionResult = ActionResult.FAILED,
    ) -> Any:
        """One admin call: feed the breaker, turn 404 into stale and other errors into failed.

        4xx answers show the cluster is up (breaker success); 5xx and no answer, after the
        client's own retries, count as failures.
        """
        breaker = self.breakers.for_cluster(cluster)
        try:
            value = fn()
        except ConflictError as exc:
            breaker.record_success()
            detail = f"{what}: conflict (409) {exc.reason}"
            raise _Finish(on_conflict, detail, **_error_info(exc)) from None
        except NotFoundError as exc:
            breaker.record_success()  # an answer: the cluster is up
            raise _Finish(ActionResult.STALE, f"{what}: not found", **_error_info(exc)) from None
        except (ServerError, UnavailableError) as exc:
            breaker.record_failure()
            raise _Finish(ActionResult.FAILED, f"{what}: {exc}", **_error_info(exc)) from None
        except PulsarAdminError as exc:
            breaker.record_success()
            raise _Finish(ActionResult.FAILED, f"{what}: {exc}", **_error_info(exc)) from None
        breaker.record_success()
        return value

    def _layout(self, decision: SplitDecision) -> NamespaceBundles:
        layout: NamespaceBundles = self._call(
            decision.cluster, "get bundles", lambda: self.admin.get_bundles(decision.namespace)
        )
        self.layouts.put(decision.cluster, layout)
        return layout

    def _acquire(self, decision: SplitDecision | OffloadDecision) -> None:
        refused = self.limits.try_acquire(decision.kind, decision.cluster, decision.namespace)
        if refused is not None:
            raise _Finish(ActionResult.RATE_LIMITED, f"{decision.kind} rate limit per {refused}")

    def _intent(
        self, decision: SplitDecision | OffloadDecision, batch_id: str | None, *, target: str,
        action_key: str, call: dict[str, Any],
    ) -> None:
        written = self.journal.record_intent(
            decision_id=decision.decision_id,
            kind=decision.kind.value,
            cluster=decision.cluster,
            namespace=decision.namespace,
            target=target,
            action_key=action_key,
            payload={"decision": decision.to_dict(), "call": call},
            batch_id=batch_id,
            at_ms=self.clock.now_ms(),
        )
        if not written:
            raise _Finish(ActionResult.DUPLICATE, "decision already in the journal")

    def _split_steps(self, decision: SplitDecision, batch_id: str | None) -> _Step:
        layout = self._layout(decision)
        if not layout.has(decision.bundle):
            raise _Finish(ActionResult.STALE, f"bundle {decision.bundle} no longer in the layout")
        action_key = split_action_key(decision)
        earlier = self.journal.applied_with_key(action_key)
        if earlier is not None:
            raise _Finish(ActionResult.DUPLICATE, f"same split done by {earlier.decision_id}")
        self._acquire(decision)
        call = {
            "op": "split_bundle",
            "namespace": decision.namespace,
            "bundle": str(decision.bundle),
            "algorithm": SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value,
            "boundaries": list(decision.boundaries),
            "unload": self.settings.unload_after_split,
        }
        self._intent(
            decision, batch_id, target=decision.bundle.key(decision.namespace),
            action_key=action_key, call=call,
        )
        try:
            self._call(
                decision.cluster,
                "split bundle",
                lambda: self.admin.split_bundle(
                    decision.namespace,
                    decision.bundle,
                    algorithm=SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE.value,
                    boundaries=decision.boundaries,
                    unload=self.settings.unload_after_split,
                ),
            )
        except _Finish as finish:
            self._outcome(decision.decision_id, finish.step.result, finish.step.detail)
            raise
        children = len(decision.boundaries) + 1
        # Pulsar answers 204 even when it found nothing to split: check the layout.
        try:
            after = self._layout(decision)
        except _Finish as finish:
            detail = f"split accepted; layout not verified ({finish.step.detail})"
            self._outcome(decision.decision_id, ActionResult.APPLIED, detail)
            return _Step(ActionResult.APPLIED, detail, {"status": 204}, children=children)
        if split_done(after, decision.bundle, decision.boundaries):
            detail = f"split into {children} bundles"
            self._outcome(decision.decision_id, ActionResult.APPLIED, detail)
            pulsar = {"status": 204, "num_bundles": after.num_bundles}
            return _Step(ActionResult.APPLIED, detail, pulsar, children=children)
        detail = "split answered 204 but the layout lacks the boundaries"
        self._outcome(decision.decision_id, ActionResult.FAILED, detail)
        return _Step(ActionResult.FAILED, detail, {"status": 204, "num_bundles": after.num_bundles})

    def _offload_steps(self, decision: OffloadDecision, batch_id: str | None) -> _Step:
        status = self._call(
            decision.cluster, "offload status", lambda: self.admin.offload_status(decision.topic)
        )
        if status.state is OffloadState.RUNNING:
            raise _Finish(ActionResult.ALREADY_RUNNING, "offload status is RUNNING")
        stats = self._call(
            decision.cluster, "internal stats", lambda: self.admin.internal_stats(decision.topic)
        )
        point = self._offload_point(stats, decision.threshold_bytes)
        if point is None:
            raise _Finish(ActionResult.NOTHING_TO_OFFLOAD, "no ledger to offload above threshold")
        action_key = offload_action_key(decision, point)
        earlier = self.journal.applied_with_key(action_key)
        if earlier is not None:
            raise _Finish(ActionResult.DUPLICATE, f"same offload done by {earlier.decision_id}")
        self._acquire(decision)
        call = {"op": "trigger_offload", "topic": decision.topic, "message_id": point.to_json()}
        self._intent(decision, batch_id, target=decision.topic, action_key=action_key, call=call)
        try:
            self._call(
                decision.cluster,
                "trigger offload",
                lambda: self.admin.trigger_offload(decision.topic, point),
                on_conflict=ActionResult.ALREADY_RUNNING,
            )
        except _Finish as finish:
            self._outcome(decision.decision_id, finish.step.result, finish.step.detail)
            raise
        moved = sum(
            lg.size
            for lg in stats.ledgers_with_sizes()
            if lg.ledger_id < point.ledger_id and not lg.offloaded and lg.entries > 0
        )
        detail = f"offload up to ledger {point.ledger_id} ({moved} bytes)"
        self._outcome(decision.decision_id, ActionResult.APPLIED, detail)
        pulsar = {"status": 204, "message_id": point.to_json()}
        return _Step(ActionResult.APPLIED, detail, pulsar, bytes_offloaded=moved)

    def _outcome(self, decision_id: str, result: ActionResult, detail: str) -> None:
        self.journal.record_outcome(
            decision_id, result=result.value, detail=detail, at_ms=self.clock.now_ms()
        )

    def _report(self, decision: Decision, outcome: Outcome, batch_id: str | None) -> None:
        self.stats.count(decision.kind.value, outcome.result.value, outcome.reason)
        if outcome.result in (ActionResult.APPLIED, ActionResult.DRY_RUN):
            target = (
                decision.bundle.key(decision.namespace)
                if isinstance(decision, SplitDecision)
                else decision.topic
            )
            detail = outcome.detail
            if isinstance(decision, SplitDecision) and outcome.result is ActionResult.DRY_RUN:
                points = ", ".join(format_position(b) for b in decision.boundaries)
                detail = f"would split at {points} ({decision.reason.value})"
            action = AppliedAction(
                decision_id=decision.decision_id,
                kind=decision.kind.value,
                cluster=decision.cluster,
                namespace=decision.namespace,
                target=target,
                detail=detail,
                at_ms=self.clock.now_ms(),
            )
            if outcome.result is ActionResult.APPLIED:
                self.stats.applied(action)
            else:
                self.stats.planned(action)
        level = logging.INFO if outcome.result is not ActionResult.FAILED else logging.WARNING
        log.log(
            level,
            "%s %s %s: %s (%s)",
            decision.kind.value,
            decision.decision_id,
            outcome.result.value,
            outcome.detail,
            self.settings.mode,
        )
        self.audit.write(
            {
                "at_ms": self.clock.now_ms(),
                "batch_id": batch_id,
                "mode": self.settings.mode,
                "decision": decision.to_dict(),
                "result": outcome.result.value,
                "reason": outcome.reason,
                "detail": outcome.detail,
                "pulsar": outcome.pulsar,
                "duration_s": round(outcome.duration_s, 6),
            }
        )

    # -- restart ------------------------------------------------------------------------------

    def reconcile(self) -> list[tuple[str, ActionResult]]:
        """Settle intents a crash left without outcome by reading Pulsar's state; re-apply none.

        An intent whose check fails (cluster down) stays pending for the next call.
        """
        settled: list[tuple[str, ActionResult]] = []
        with self._lock:
            for entry in self.journal.pending():
                try:
                    result, detail = reconcile_entry(self.admin, self.layouts, entry)
                except PulsarAdminError as exc:
                    log.warning("cannot reconcile %s yet: %s", entry.decision_id, exc)
                    continue
                self._outcome(entry.decision_id, result, f"reconciled: {detail}")
                self.stats.count(entry.kind, result.value, "Reconciled")
                self.audit.write(
                    {
                        "at_ms": self.clock.now_ms(),
                        "reconciled": True,
                        "decision_id": entry.decision_id,
                        "kind": entry.kind,
                        "intent": entry.payload,
                        "result": result.value,
                        "detail": detail,
                    }
                )
                settled.append((entry.decision_id, result))
        return settled

    def close(self) -> None:
        self.journal.close()
        self.audit.close()

