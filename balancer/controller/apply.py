"""The controller: turns split, offload and move decisions into admin calls, safely.

For every decision, in order: allow/deny list -> already handled (journal) -> dry-run ->
writer lease -> circuit breaker -> fresh check against Pulsar (bundle still there with the
same range; offload not running; the offload point) -> same action already done -> rate limit
-> journal intent -> writer lease again -> the call -> journal outcome. Every decision ends
in exactly one `Outcome`, written to the audit log and counted in `stats`. A changed layout
is "stale" (a split's 412 names a bundle no longer in the layout: read back; its 404 is the
namespace gone), a 409 on offload is "already_running": outcomes, not crashes, and never
retried.

A split or offload that was sent and got no answer (a timeout, a reset) or a 5xx is read
back from Pulsar (the layout, the offload status and ledgers): `applied` when Pulsar shows it
done, else `unknown` (no answer: it may still be in flight) or `failed` (Pulsar answered).
An `unknown` action is rechecked by `reconcile()` on the next batch and after a restart,
never re-sent; no new action touches its bundle or topic until it is settled. An offload's
204 only starts it: it is `started` and followed the same way until its status says SUCCESS
(`applied`, with its bytes) or ERROR (`failed`, with Pulsar's lastError); see offload_steps.

Without the single-writer lease (`writer_gate`) a decision ends `no_lease`, touching
nothing; a lease lapsed just before the call closes the journaled intent as `no_lease`.
Reads (`reconcile()`, layouts) need no lease.

A move (`balancer.core.moves.MoveDecision`) takes the same gate, journal, limits and breaker;
its unload to a destination is verified by reading ownership (see move_steps).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from balancer.controller.audit import AuditLog
from balancer.controller.breaker import Breakers, BreakerStatus
from balancer.controller.clock import Clock, SystemClock
from balancer.controller.journal import Journal, JournalEntry
from balancer.controller.layouts import LayoutCache
from balancer.controller.move_steps import leftover_cleanup, move_steps
from balancer.controller.offload_point import OffloadPointFn, default_offload_point
from balancer.controller.offload_steps import offload_steps
from balancer.controller.outcome import (
    MOVED,
    AnyDecision,
    Outcome,
    OutcomeListener,
    kind_of,
    rechecked_outcome,
    report_outcome,
)
from balancer.controller.outcome import Finish as _Finish
from balancer.controller.outcome import Step as _Step
from balancer.controller.outcome import error_info as _error_info
from balancer.controller.ports import AdminPort, MovePort, WriterLease
from balancer.controller.rate_limits import ActionLimits
from balancer.controller.reconcile import (
    follow_entry,
    recheck_entry,
    reconcile_entry,
)
from balancer.controller.settings import ControllerSettings
from balancer.controller.split_steps import split_steps
from balancer.controller.stats import OFFLOAD_REASON, AppliedAction, ControllerStats
from balancer.controller.writer_gate import check_writer
from balancer.core.bundles import NamespaceBundles
from balancer.core.decisions import DecisionKind, OffloadDecision, SplitDecision
from balancer.core.moves.model import MoveDecision
from balancer.core.results import ActionResult
from balancer.pulsar.errors import (
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    PulsarAdminError,
    ServerError,
    UnavailableError,
)
from balancer.pulsar.routing import routed_to

log = logging.getLogger(__name__)

_D = TypeVar("_D", SplitDecision, OffloadDecision, MoveDecision)
_T = TypeVar("_T")


def _none_draining(_cluster: str) -> frozenset[str]:
    return frozenset()


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
        lease: WriterLease | None = None,
        mover: MovePort | None = None,
        draining_of: Callable[[str], frozenset[str]] | None = None,
    ) -> None:
        self.admin = admin
        # cluster -> brokers marked draining: no move sends a bundle to one (default none).
        self.draining_of: Callable[[str], frozenset[str]] = draining_of or _none_draining
        # Moves need unload-to-a-destination and ownership reads (None: moves end `failed`).
        self.mover = mover
        self.lease = lease  # None: this balancer is the only writer (no lease configured)
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
        # Decisions whose outcome is unknown, kept for the listeners once a recheck settles them.
        self._unsettled: dict[str, AnyDecision] = {}
        # One decision at a time per cluster (the journal order of a cluster is the truth);
        # clusters never wait for each other's admin calls.
        self._locks_guard = threading.Lock()
        self._cluster_locks: dict[str, threading.Lock] = {}

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

    def handle(self, decision: AnyDecision, *, batch_id: str | None = None) -> Outcome:
        if isinstance(decision, SplitDecision):
            return self.apply_split(decision, batch_id=batch_id)
        if isinstance(decision, MoveDecision):
            return self.apply_move(decision, batch_id=batch_id)
        return self.apply_offload(decision, batch_id=batch_id)

    def apply_move(self, decision: MoveDecision, *, batch_id: str | None = None) -> Outcome:
        outcome = self._run(
            decision, batch_id, decision.reason.value, lambda d, b: move_steps(self, d, b)
        )
        # A refused unload that left a destination behind: one follow-up move uses it up
        # (its own outcome, journaled and audited), after this decision's cluster lock.
        cleanup = leftover_cleanup(self, decision, outcome.refusal)
        if cleanup is not None:
            self.apply_move(cleanup, batch_id=batch_id)
        return outcome

    def last_moves(self, cluster: str) -> dict[str, int]:
        """Bundle name -> when its last move was sent (ms), from the journal (a restart
        keeps it): `BundleState.last_moved_ms` for the move decision's grace period."""
        return self.journal.last_moves(cluster)

    def apply_split(self, decision: SplitDecision, *, batch_id: str | None = None) -> Outcome:
        return self._run(
            decision, batch_id, decision.reason.value, lambda d, b: split_steps(self, d, b)
        )

    def apply_offload(self, decision: OffloadDecision, *, batch_id: str | None = None) -> Outcome:
        return self._run(decision, batch_id, OFFLOAD_REASON, lambda d, b: offload_steps(self, d, b))

    def _run(
        self,
        decision: _D,
        batch_id: str | None,
        reason: str,
        steps: Callable[[_D, str | None], _Step],
    ) -> Outcome:
        started = self.clock.monotonic()
        # Every admin call of the decision goes to the cluster its stats came from.
        with self._cluster_lock(decision.cluster), routed_to(decision.cluster):
            try:
                self._gate(decision)
                step = steps(decision, batch_id)
            except _Finish as finish:
                step = finish.step
        outcome = Outcome(
            decision_id=decision.decision_id,
            kind=kind_of(decision),
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
            read_back=step.read_back,
            algorithm_refused=step.algorithm_refused,
            refusal=step.refusal,
            sessions_moved=(
                decision.sessions
                if isinstance(decision, MoveDecision) and step.result in MOVED
                else 0
            ),
        )
        self._report(decision, outcome, batch_id)
        if outcome.result in (ActionResult.UNKNOWN, ActionResult.STARTED):
            self._unsettled[decision.decision_id] = decision
        self._notify(outcome)
        return outcome

    def _cluster_lock(self, cluster: str) -> threading.Lock:
        with self._locks_guard:
            return self._cluster_locks.setdefault(cluster, threading.Lock())

    def _notify(self, outcome: Outcome) -> None:
        for listener in self._listeners:
            try:
                listener(outcome)
            except Exception:  # a metrics bug must not stop the controller
                log.exception("outcome listener failed")

    def _gate(self, decision: AnyDecision) -> None:
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
        check_writer(self.lease, "nothing touched")
        if not self.breakers.for_cluster(decision.cluster).allow():
            raise _Finish(
                ActionResult.BREAKER_OPEN, f"circuit breaker open for cluster {decision.cluster}"
            )

    def _call(
        self,
        cluster: str,
        what: str,
        fn: Callable[[], _T],
        *,
        on_conflict: ActionResult = ActionResult.FAILED,
    ) -> _T:
        """One admin call: feed the breaker, turn 404 into stale and other errors into failed.

        4xx answers show the cluster is up (breaker success); 5xx and no answer, after the
        client's own retries, count as failures.
        """
        breaker = self.breakers.for_cluster(cluster)
        try:
            value = fn()
        except OutcomeUnknownError as exc:
            breaker.record_failure()
            detail = f"{what}: sent, no answer ({exc})"
            raise _Finish(ActionResult.UNKNOWN, detail, **_error_info(exc)) from None
        except ConflictError as exc:
            breaker.record_success()
            detail = f"{what}: conflict (409) {exc.reason}"
            raise _Finish(on_conflict, detail, **_error_info(exc)) from None
        except NotFoundError as exc:
            breaker.record_success()  # an answer: the cluster is up
            raise _Finish(ActionResult.STALE, f"{what}: not found", **_error_info(exc)) from None
        except (ServerError, UnavailableError) as exc:
            # The breaker of the cluster that failed: a redirect may have led elsewhere.
            self.breakers.for_cluster(exc.cluster or cluster).record_failure()
            raise _Finish(ActionResult.FAILED, f"{what}: {exc}", **_error_info(exc)) from None
        except PulsarAdminError as exc:
            breaker.record_success()
            raise _Finish(ActionResult.FAILED, f"{what}: {exc}", **_error_info(exc)) from None
        breaker.record_success()
        return value

    def _layout(self, decision: SplitDecision) -> NamespaceBundles:
        layout = self._call(
            decision.cluster, "get bundles", lambda: self.admin.get_bundles(decision.namespace)
        )
        self.layouts.put(decision.cluster, layout)
        return layout

    def _acquire(self, decision: AnyDecision) -> None:
        kind = kind_of(decision)
        refused = self.limits.try_acquire(kind, decision.cluster, decision.namespace)
        if refused is not None:
            raise _Finish(ActionResult.RATE_LIMITED, f"{kind} rate limit per {refused}")

    def _intent(
        self,
        decision: AnyDecision,
        batch_id: str | None,
        *,
        target: str,
        action_key: str,
        call: dict[str, Any],
        expected: dict[str, Any] | None = None,
    ) -> None:
        written = self.journal.record_intent(
            decision_id=decision.decision_id,
            kind=kind_of(decision).value,
            cluster=decision.cluster,
            namespace=decision.namespace,
            target=target,
            action_key=action_key,
            payload={"decision": decision.to_dict(), "call": call, "expected": expected or {}},
            batch_id=batch_id,
            at_ms=self.clock.now_ms(),
        )
        if not written:
            raise _Finish(ActionResult.DUPLICATE, "decision already in the journal")

    def _wait_unsettled(self, decision: AnyDecision, target: str) -> None:
        """No new action on a bundle or topic while an earlier one there has no known outcome
        (a bundle's split or move waits for both)."""
        kind = kind_of(decision)
        kinds = (kind,) if kind is DecisionKind.OFFLOAD else (DecisionKind.SPLIT, DecisionKind.MOVE)
        unsettled = (self.journal.unsettled_for(k.value, target) for k in kinds)
        earlier = next((e for e in unsettled if e is not None), None)
        if earlier is not None:
            raise _Finish(
                ActionResult.DUPLICATE,
                f"outcome of {earlier.decision_id} on {target} not known yet: rechecked first",
            )

    def _outcome(self, decision_id: str, result: ActionResult, detail: str) -> None:
        self.journal.record_outcome(
            decision_id, result=result.value, detail=detail, at_ms=self.clock.now_ms()
        )

    def _report(self, decision: AnyDecision, outcome: Outcome, batch_id: str | None) -> None:
        report_outcome(
            self.stats, self.audit, decision, outcome,
            batch_id=batch_id, mode=self.settings.mode, now_ms=self.clock.now_ms(),
        )  # fmt: skip

    # -- restart ------------------------------------------------------------------------------

    def reconcile(self) -> list[tuple[str, ActionResult]]:
        """Settle intents a crash left without outcome, `unknown` outcomes and `started`
        offloads, by reading Pulsar's state; re-apply none. Returns the settled ones (an
        action that only moved to `started` is not settled yet).

        An intent whose check fails (cluster down) stays pending for the next call; an
        `unknown` action Pulsar does not show yet stays unknown until `unknown_settle_s`; a
        `started` offload is followed until SUCCESS or ERROR, at most `offload_follow_s`.

        Only this process's actions are settled, and those whose writer is provably gone
        (taken over first: `Journal.claim`): another process's open intent is its action in
        flight (an `apply` beside `run`). In dry-run nothing is settled: a balancer that
        acts on nothing writes no outcome, counts none and audits none; open intents wait
        for the next process that acts.
        """
        settled: list[tuple[str, ActionResult]] = []
        rechecked: list[Outcome] = []
        if self.settings.mode == "dry-run":
            return settled
        # A cluster whose actions are in flight (its lock held) is left for a later call:
        # its open intents are those actions, not a crash's, and waiting would hold the
        # other clusters up.
        for entry in self.journal.pending():
            lock = self._cluster_lock(entry.cluster)
            if not lock.acquire(blocking=False):
                continue
            try:
                if entry.decision_id not in {e.decision_id for e in self.journal.pending()}:
                    continue  # settled by its action just before we got the lock
                if not self.journal.claim(entry):
                    continue  # another process's action, in flight: its writer settles it
                try:
                    with routed_to(entry.cluster):
                        result, detail = reconcile_entry(
                            self.admin, self.layouts, entry, mover=self.mover
                        )
                except PulsarAdminError as exc:
                    log.warning("cannot reconcile %s yet: %s", entry.decision_id, exc)
                    continue
                self._outcome(entry.decision_id, result, f"reconciled: {detail}")
                self.stats.count(entry.kind, result.value, "Reconciled")
                self._audit_settled(entry, "reconciled", result, detail)
                settled.append((entry.decision_id, result))
            finally:
                lock.release()
        # Unknown actions first: one read back as RUNNING becomes `started`, followed below.
        for entries, settle in (
            (self.journal.unknown, self._recheck),
            (self.journal.started, self._follow),
        ):
            for entry in entries():  # started() is read after the rechecks ran
                if not self.journal.claim(entry):
                    continue  # another running process's action: it rechecks it
                lock = self._cluster_lock(entry.cluster)
                if not lock.acquire(blocking=False):
                    continue
                try:
                    # Outside any decision: route the checks to the action's cluster (the
                    # offload status is answered there only; elsewhere the topic is a 404).
                    with routed_to(entry.cluster):
                        outcome = settle(entry)
                finally:
                    lock.release()
                if outcome is not None:
                    rechecked.append(outcome)
                    if outcome.result is not ActionResult.STARTED:
                        settled.append((entry.decision_id, outcome.result))
        for outcome in rechecked:
            self._notify(outcome)
        return settled

    def _recheck(self, entry: JournalEntry) -> Outcome | None:
        """Settle one `unknown` action from Pulsar's state (None: still unknown)."""
        return self._settle(entry, "rechecked", ActionResult.UNKNOWN, lambda age_s: recheck_entry(
            self.admin, self.layouts, entry, settled=age_s >= self.settings.unknown_settle_s,
            mover=self.mover, age_s=age_s, move_settle_s=self.settings.move_settle_s,
        ))  # fmt: skip

    def _follow(self, entry: JournalEntry) -> Outcome | None:
        """Settle one `started` offload from its status (None: still running)."""
        return self._settle(entry, "followed", ActionResult.STARTED, lambda age_s: follow_entry(
            self.admin, entry, age_s=age_s, follow_s=self.settings.offload_follow_s
        ))  # fmt: skip

    def _settle(
        self,
        entry: JournalEntry,
        how: str,
        unchanged: ActionResult,
        read: Callable[[float], tuple[ActionResult, str]],
    ) -> Outcome | None:
        """Record what Pulsar's state says of an unsettled action (None: `unchanged`, or
        Pulsar cannot be read now). An unknown offload read back RUNNING becomes `started`."""
        age_s = (self.clock.now_ms() - entry.intent_at_ms) / 1000
        try:
            result, detail = read(age_s)
        except PulsarAdminError as exc:
            log.warning("cannot check %s yet: %s", entry.decision_id, exc)
            return None
        if result is unchanged:
            log.info(
                "%s %s still %s after %.0f s: %s",
                entry.kind, entry.decision_id, result.value, age_s, detail,
            )  # fmt: skip
            return None
        self._outcome(entry.decision_id, result, f"{how}: {detail}")
        final = result is not ActionResult.STARTED  # a started offload is followed on
        decision = self._unsettled.pop(entry.decision_id, None) if final else (
            self._unsettled.get(entry.decision_id)
        )  # fmt: skip
        moved = int(entry.payload.get("expected", {}).get("bytes_offloaded", 0))
        outcome = rechecked_outcome(
            entry, result, f"{how}: {detail}", age_s=age_s, decision=decision,
            bytes_offloaded=moved,
        )  # fmt: skip
        self.stats.count(entry.kind, result.value, outcome.reason)
        if result is ActionResult.APPLIED:
            self.stats.applied(AppliedAction(
                decision_id=entry.decision_id, kind=entry.kind, cluster=entry.cluster,
                namespace=entry.namespace, target=entry.target, detail=outcome.detail,
                at_ms=self.clock.now_ms(),
            ))  # fmt: skip
        log.log(
            logging.WARNING if result is ActionResult.FAILED else logging.INFO,
            "%s %s %s: %s (%s)", entry.kind, entry.decision_id, how, result.value, detail,
        )  # fmt: skip
        self._audit_settled(entry, how, result, detail)
        return outcome

    def _audit_settled(
        self, entry: JournalEntry, how: str, result: ActionResult, detail: str
    ) -> None:
        self.audit.write({
            "at_ms": self.clock.now_ms(), how: True, "decision_id": entry.decision_id,
            "kind": entry.kind, "intent": entry.payload, "result": result.value,
            "detail": detail, "writer": entry.writer, "settled_by": self.journal.writer_id,
        })  # fmt: skip

    def close(self) -> None:
        self.journal.close()
        self.audit.close()
