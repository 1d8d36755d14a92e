"""What came of an action: one vocabulary from the controller to the exporter's labels.

`ActionResult` is what the controller records, counts and audits; its values are the
`result` label of `pulsar_balancer_splits_total`, `pulsar_balancer_offloads_total` and
`pulsar_balancer_moves_total` (docs/operations.md; alerts and dashboards select on them, so
a value never changes). `SPLIT_RESULTS` / `OFFLOAD_RESULTS` / `MOVE_RESULTS` are the results
each kind of action can end with (the label values created at 0 for every cluster), and
`DECIDED` the one split label that is not a result: every split decision, whatever came of
it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal


class ActionResult(StrEnum):
    APPLIED = "applied"  # Pulsar accepted the action (or reconciliation found it done)
    DRY_RUN = "dry_run"  # mode dry-run: decided and logged, nothing touched
    STALE = "stale"  # the bundle is gone or its range changed since the decision
    ALREADY_RUNNING = "already_running"  # an offload is in progress (status or 409)
    NOTHING_TO_OFFLOAD = "nothing_to_offload"  # the offload point is empty
    DENIED = "denied"  # namespace outside the allow-list or inside the deny-list
    RATE_LIMITED = "rate_limited"
    BREAKER_OPEN = "breaker_open"  # the cluster's circuit breaker pauses actions
    # Another balancer of the peer group holds the single-writer lease, or this one's lapsed:
    # decided, not applied, not journaled (the holder acts on it).
    NO_LEASE = "no_lease"
    DUPLICATE = "duplicate"  # this decision (or this exact action) was handled before
    ABANDONED = "abandoned"  # a crashed intent that Pulsar shows was never applied
    FAILED = "failed"  # Pulsar refused or failed, or read back as never applied; not retried
    # Sent, no answer (timeout, reset), and Pulsar's state does not show it yet: rechecked
    # on the next batch and after a restart, never re-sent; settles as applied or failed.
    UNKNOWN = "unknown"
    # An offload Pulsar accepted (204 = started, `PersistentTopic.triggerOffload`): followed
    # by reconcile() through the offload status until SUCCESS (`applied`, bytes counted) or
    # ERROR (`failed` with lastError); never re-sent, no new offload of the topic meanwhile.
    STARTED = "started"
    # A move whose bundle is owned by a broker other than the chosen destination (the
    # modular load manager's next lookup can place it elsewhere, apache/pulsar#24884): the
    # clients reconnected, the load went elsewhere; the owner is in the audit log.
    LANDED_ELSEWHERE = "landed_elsewhere"


# Offload-only results: an offload's 204 is `started`, `applied` only once Pulsar's status
# says SUCCESS; `stale` is a split's (a bundle gone or changed).
_OFFLOAD_ONLY = {
    ActionResult.STARTED,
    ActionResult.ALREADY_RUNNING,
    ActionResult.NOTHING_TO_OFFLOAD,
}
# Move-only: a move is `applied` once the destination owns the bundle; `unknown` while no
# broker owns it yet (rechecked, never re-sent); `stale` when the bundle left its source or
# no longer exists (412).
_MOVE_ONLY = {ActionResult.LANDED_ELSEWHERE}
SPLIT_RESULTS: Final[frozenset[ActionResult]] = frozenset(ActionResult) - _OFFLOAD_ONLY - _MOVE_ONLY
OFFLOAD_RESULTS: Final[frozenset[ActionResult]] = (
    frozenset(ActionResult) - {ActionResult.STALE} - _MOVE_ONLY
)
MOVE_RESULTS: Final[frozenset[ActionResult]] = frozenset(ActionResult) - _OFFLOAD_ONLY

# The split label counted for every decision before its result (not an ActionResult).
Decided = Literal["decided"]
DECIDED: Final[Decided] = "decided"
