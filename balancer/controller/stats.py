"""Controller outcomes for the exporter and the run summary: counters and applied actions.

Counters are keyed (kind, result, reason): kind `split|offload`, result an `ActionResult`
(`balancer.core.results`) or `skipped`, reason a `SplitReason` spelling for splits (or a
`SkipReason` for skips) and `Size` for offloads. All label values come from bounded enums,
never from topic names.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

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
