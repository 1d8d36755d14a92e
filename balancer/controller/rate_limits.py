"""Rate limits on actions: at most N per minute per cluster and per namespace (sliding window),
for each kind of action (split, offload, move)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable

from balancer.controller.clock import Clock
from balancer.core.decisions import DecisionKind

WINDOW_S = 60.0


class SlidingWindowLimiter:
    """At most `per_minute` acquisitions per key in any 60 s; 0 allows none."""

    def __init__(self, per_minute: int, clock: Clock) -> None:
        if per_minute < 0:
            raise ValueError(f"per_minute must be >= 0, got {per_minute}")
        self._per_minute = per_minute
        self._clock = clock
        self._events: dict[Hashable, deque[float]] = {}

    def _recent(self, key: Hashable) -> deque[float]:
        events = self._events.setdefault(key, deque())
        horizon = self._clock.monotonic() - WINDOW_S
        while events and events[0] <= horizon:
            events.popleft()
        return events

    def available(self, key: Hashable) -> bool:
        return len(self._recent(key)) < self._per_minute

    def acquire(self, key: Hashable) -> None:
        self._recent(key).append(self._clock.monotonic())


class ActionLimits:
    """Splits, offloads and moves per minute, per cluster and per namespace; both must allow."""

    def __init__(
        self,
        *,
        splits_per_minute: int,
        splits_per_minute_per_namespace: int,
        offloads_per_minute: int,
        offloads_per_minute_per_namespace: int,
        clock: Clock,
        moves_per_minute: int = 60,
        moves_per_minute_per_namespace: int = 40,
    ) -> None:
        self._cluster = {
            DecisionKind.SPLIT: SlidingWindowLimiter(splits_per_minute, clock),
            DecisionKind.OFFLOAD: SlidingWindowLimiter(offloads_per_minute, clock),
            DecisionKind.MOVE: SlidingWindowLimiter(moves_per_minute, clock),
        }
        self._namespace = {
            DecisionKind.SPLIT: SlidingWindowLimiter(splits_per_minute_per_namespace, clock),
            DecisionKind.OFFLOAD: SlidingWindowLimiter(offloads_per_minute_per_namespace, clock),
            DecisionKind.MOVE: SlidingWindowLimiter(moves_per_minute_per_namespace, clock),
        }
        self._lock = threading.Lock()

    def try_acquire(self, kind: DecisionKind, cluster: str, namespace: str) -> str | None:
        """Take one slot; None when allowed, else which limit refused ("cluster"/"namespace")."""
        with self._lock:
            if not self._cluster[kind].available(cluster):
                return "cluster"
            if not self._namespace[kind].available((cluster, namespace)):
                return "namespace"
            self._cluster[kind].acquire(cluster)
            self._namespace[kind].acquire((cluster, namespace))
            return None
