"""What came of one decision (`Outcome`) and the small pieces the controller builds it from.

`Step` is how a decision ended before it becomes an Outcome; `Finish` ends a decision early
with one (control flow inside one decision, not an error). What the controller concluded is
typed (`result`, `read_back`, `algorithm_refused`, `rechecked`); `pulsar` keeps what Pulsar
answered, raw, for the audit log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from balancer.controller.audit import AuditLog
from balancer.controller.journal import JournalEntry
from balancer.controller.stats import OFFLOAD_REASON, AppliedAction, ControllerStats
from balancer.core.bundles import format_position
from balancer.core.decisions import Decision, DecisionKind, OffloadDecision, SplitDecision
from balancer.core.moves.model import MoveDecision
from balancer.core.moves.refusals import UnloadRefusal
from balancer.core.results import ActionResult
from balancer.core.split import SplitAlgorithm
from balancer.pulsar.errors import PulsarAdminError
from balancer.pulsar.models import InternalStats, MessageId

log = logging.getLogger("balancer.controller.apply")  # the controller's logger, as before

# Every decision the controller applies. Moves stay out of the core's `Decision` union
# (balancer.core.moves.model imports balancer.core.decisions), and the detector's consumers
# of `Decision` need not know them.
AnyDecision = Decision | MoveDecision

# Results after which a move's bundle was unloaded: its clients reconnected.
MOVED = (ActionResult.APPLIED, ActionResult.LANDED_ELSEWHERE)


def kind_of(decision: AnyDecision) -> DecisionKind:
    return DecisionKind.MOVE if isinstance(decision, MoveDecision) else decision.kind


def target_of(decision: AnyDecision) -> str:
    """The bundle key (`tenant/ns/0x.._0x..`) or the topic the decision acts on."""
    return decision.topic if isinstance(decision, OffloadDecision) else (
        decision.bundle.key(decision.namespace)
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outcome:
    decision_id: str
    kind: DecisionKind
    cluster: str
    namespace: str
    result: ActionResult
    reason: str  # SplitReason spelling for splits, "Size" for offloads, MoveReason for moves
    detail: str
    duration_s: float
    pulsar: dict[str, Any] = field(default_factory=dict)  # what Pulsar answered, for the audit
    children: int = 0  # bundles created by an applied split
    # Bytes an applied offload moved (closed ledgers before the point): set only once Pulsar
    # shows it done (status SUCCESS or the ledgers offloaded), never on the 204 alone.
    bytes_offloaded: int = 0
    # The decision itself, for listeners that report what was done (e.g. the run summary).
    decision: AnyDecision | None = field(default=None, compare=False, repr=False)
    # A later recheck settling an earlier `unknown` outcome (not a new decision).
    rechecked: bool = False
    # What reading Pulsar's state back after an unclear answer showed (None: not read back).
    read_back: ActionResult | None = None
    # The algorithm a broker refused with 412 (its supportedNamespaceBundleSplitAlgorithms
    # lacks it); the outcome is then `failed`.
    algorithm_refused: SplitAlgorithm | None = None
    # Producers + consumers a move's unload reconnected (applied or landed elsewhere).
    sessions_moved: int = 0
    # Why Pulsar refused a move's unload (None: it did not refuse, or not a move).
    refusal: UnloadRefusal | None = None


OutcomeListener = Callable[[Outcome], None]


@dataclass(frozen=True, slots=True)
class Step:
    """How one decision ended, before it becomes an Outcome."""

    result: ActionResult
    detail: str
    pulsar: dict[str, Any] = field(default_factory=dict)
    children: int = 0
    bytes_offloaded: int = 0
    read_back: ActionResult | None = None  # as Outcome's
    algorithm_refused: SplitAlgorithm | None = None  # as Outcome's
    refusal: UnloadRefusal | None = None  # as Outcome's


class Finish(Exception):
    """Ends a decision early with a result (control flow inside one decision, not an error)."""

    def __init__(self, result: ActionResult, detail: str, **pulsar: Any) -> None:
        super().__init__(detail)
        self.step = Step(result, detail, pulsar)

    @classmethod
    def of(cls, step: Step) -> Finish:
        finish = cls(step.result, step.detail)
        finish.step = step
        return finish


def read_back_needed(step: Step) -> bool:
    """Unanswered (unknown), a 5xx or a 404 (after a retried 5xx): Pulsar may have acted."""
    status = step.pulsar.get("status")
    return step.result is ActionResult.UNKNOWN or status == 404 or (status or 0) >= 500


def split_read_back_needed(step: Step) -> bool:
    """A split to read back: as `read_back_needed`, or a 412 (a bundle not in the layout,
    `NamespaceBundles.validateBundle`: split by Pulsar's own auto-split or by our own earlier
    attempt). A split's 404 is the namespace gone: nothing to read."""
    return step.pulsar.get("status") == 412 or (
        read_back_needed(step) and step.pulsar.get("status") != 404
    )


# Pulsar's 412 when `supportedNamespaceBundleSplitAlgorithms` lacks the algorithm sent
# (NamespacesBase.internalSplitNamespaceBundleAsync).
_UNSUPPORTED_ALGORITHM = "unsupported namespace bundle split algorithm"


def algorithm_refused(step: Step, algorithm: SplitAlgorithm) -> Step | None:
    """The split's Step when the broker refused the algorithm itself (412), else None."""
    reason = str(step.pulsar.get("reason", ""))
    if step.pulsar.get("status") != 412 or _UNSUPPORTED_ALGORITHM not in reason.lower():
        return None
    detail = (
        f"the broker refuses {algorithm.value} (412: {reason}): add it to the brokers' "
        "supportedNamespaceBundleSplitAlgorithms"
    )
    return Step(ActionResult.FAILED, detail, step.pulsar, algorithm_refused=algorithm)


def error_info(exc: PulsarAdminError) -> dict[str, Any]:
    return {
        "error": type(exc).__name__,
        "status": exc.status,
        "reason": exc.reason,
        "method": exc.method,
        "url": exc.url,  # the client's URLs never carry credentials
        "attempts": exc.attempts,
    }


def bytes_before(stats: InternalStats, point: MessageId) -> int:
    """Bytes an offload up to `point` moves: closed, non-empty, not yet offloaded ledgers."""
    return sum(
        lg.size
        for lg in stats.ledgers_with_sizes()
        if lg.ledger_id < point.ledger_id and not lg.offloaded and lg.entries > 0
    )


def split_action_key(decision: SplitDecision) -> str:
    points = ",".join(format_position(b) for b in decision.boundaries)
    return f"split|{decision.cluster}|{decision.namespace}|{decision.bundle}|{points}"


def offload_action_key(decision: OffloadDecision, point: MessageId) -> str:
    return f"offload|{decision.cluster}|{decision.topic}|{point.ledger_id}:{point.entry_id}"


def rechecked_outcome(
    entry: JournalEntry,
    result: ActionResult,
    detail: str,
    *,
    age_s: float,
    decision: AnyDecision | None,
    bytes_offloaded: int = 0,
) -> Outcome:
    """The Outcome that settles an earlier `unknown` or `started` one (`decision` None after
    a restart); `bytes_offloaded` only for an applied offload."""
    call = entry.payload.get("call", {})
    sessions = 0
    if entry.kind == DecisionKind.SPLIT.value:
        reasons = entry.payload.get("decision", {}).get("reasons") or ["Unknown"]
        reason, children = str(reasons[0]), len(call.get("boundaries", ())) + 1
    elif entry.kind == DecisionKind.MOVE.value:
        reason, children = str(entry.payload.get("decision", {}).get("reason", "Unknown")), 0
        sessions = int(entry.payload.get("expected", {}).get("sessions", 0))
    else:
        reason, children = OFFLOAD_REASON, 0
    return Outcome(
        decision_id=entry.decision_id,
        kind=DecisionKind(entry.kind),
        cluster=entry.cluster,
        namespace=entry.namespace,
        result=result,
        reason=reason,
        detail=detail,
        duration_s=age_s,
        children=children if result is ActionResult.APPLIED else 0,
        bytes_offloaded=bytes_offloaded if result is ActionResult.APPLIED else 0,
        decision=decision,
        rechecked=True,
        sessions_moved=sessions if result in MOVED else 0,
    )


def report_outcome(
    stats: ControllerStats,
    audit: AuditLog,
    decision: AnyDecision,
    outcome: Outcome,
    *,
    batch_id: str | None,
    mode: str,
    now_ms: int,
) -> None:
    """Count the outcome, keep applied/planned actions for the summary, log it, audit it."""
    kind = kind_of(decision)
    stats.count(kind.value, outcome.result.value, outcome.reason)
    if outcome.result in (ActionResult.APPLIED, ActionResult.DRY_RUN):
        target = target_of(decision)
        detail = outcome.detail
        if isinstance(decision, SplitDecision) and outcome.result is ActionResult.DRY_RUN:
            points = ", ".join(format_position(b) for b in decision.boundaries)
            detail = f"would split at {points} ({decision.reason.value})"
        elif isinstance(decision, MoveDecision) and outcome.result is ActionResult.DRY_RUN:
            detail = (
                f"would move from {decision.source} to {decision.destination} "
                f"({decision.reason.value})"
            )
        action = AppliedAction(
            decision_id=decision.decision_id,
            kind=kind.value,
            cluster=decision.cluster,
            namespace=decision.namespace,
            target=target,
            detail=detail,
            at_ms=now_ms,
        )
        if outcome.result is ActionResult.APPLIED:
            stats.applied(action)
        else:
            stats.planned(action)
    # Under the modular load manager a move answered 204 is owned by nobody until the next
    # lookup: `unknown` then is the normal course (rechecked), not a warning.
    placing = (
        outcome.kind is DecisionKind.MOVE
        and outcome.pulsar.get("status") == 204
        and outcome.pulsar.get("owner") is None
    )
    warn = outcome.result in (
        ActionResult.FAILED, ActionResult.UNKNOWN, ActionResult.LANDED_ELSEWHERE
    ) and not (outcome.result is ActionResult.UNKNOWN and placing)  # fmt: skip
    level = logging.WARNING if warn else logging.INFO
    log.log(
        level,
        "%s %s %s: %s (%s)",
        kind.value,
        decision.decision_id,
        outcome.result.value,
        outcome.detail,
        mode,
    )
    audit.write(
        {
            "at_ms": now_ms,
            "batch_id": batch_id,
            "mode": mode,
            "decision": decision.to_dict(),
            "result": outcome.result.value,
            "reason": outcome.reason,
            "detail": outcome.detail,
            "pulsar": outcome.pulsar,
            **_flags(outcome),
            "duration_s": round(outcome.duration_s, 6),
        }
    )


def _flags(outcome: Outcome) -> dict[str, str]:
    """The typed flags an audit line carries when set (their values as spelt in metrics)."""
    flags = {
        "read_back": outcome.read_back,
        "algorithm_refused": outcome.algorithm_refused,
        "refusal": outcome.refusal,
    }
    return {name: value.value for name, value in flags.items() if value is not None}
