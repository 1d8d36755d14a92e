"""Controller outcomes for the exporter and the run summary: counters and applied actions.

Counters are keyed (kind, result, reason): kind `split|offload`, result an `ActionResult` or
`skipped`, reason a `SplitReason` spelling for splits (or a `SkipReason` for skips) and
`Size` for offloads. All label values come from bounded enums, never from topic names.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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


OFFLOAD_REASON = "Size"


@dataclass(frozen=True, slots=True)
class AppliedAction:
    decision_id: str
    kind: str
    cluster: str
    namespace: str
    target: str  # bundle key or topic
    detail: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    counters: dict[tuple[str, str, str], int]
    applied: tuple[AppliedAction, ...]
    planned: tuple[AppliedAction, ...]  # what dry-run would have done
    batches_handled: int
    batches_replayed: int


class ControllerStats:
    """Thread-safe counters; `snapshot()` gives a consistent copy to read."""

    def __init__(self, *, max_applied: int = 1000) -> None:
        self._counters: Counter[tuple[str, str, str]] = Counter()
        self._applied: deque[AppliedAction] = deque(maxlen=max_applied)
        self._planned: deque[AppliedAction] = deque(maxlen=max_applied)
        self._batches = 0
        self._replayed = 0
        self._lock = threading.Lock()

    def count(self, kind: str, result: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self._counters[(kind, result, reason)] += n

    def applied(self, action: AppliedAction) -> None:
        with self._lock:
            self._applied.append(action)

    def planned(self, action: AppliedAction) -> None:
        with self._lock:
            self._planned.append(action)

    def batch(self, *, replayed: bool) -> None:
        with self._lock:
            if replayed:
                self._replayed += 1
            else:
                self._batches += 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                counters=dict(self._counters),
                applied=tuple(self._applied),
                planned=tuple(self._planned),
                batches_handled=self._batches,
                batches_replayed=self._replayed,
            )

    def to_dict(self) -> dict[str, Any]:
        snap = self.snapshot()
        return {
            "counters": [
                {"kind": k, "result": r, "reason": why, "count": n}
                for (k, r, why), n in sorted(snap.counters.items())
            ],
            "applied": [_asdict(a) for a in snap.applied],
            "planned": [_asdict(a) for a in snap.planned],
            "batches_handled": snap.batches_handled,
            "batches_replayed": snap.batches_replayed,
        }


def _asdict(action: AppliedAction) -> dict[str, Any]:
    return {
        "decision_id": action.decision_id,
        "kind": action.kind,
        "cluster": action.cluster,
        "namespace": action.namespace,
        "target": action.target,
        "detail": action.detail,
        "at_ms": action.at_ms,
    }
