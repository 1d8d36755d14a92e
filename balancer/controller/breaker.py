"""A circuit breaker per cluster: stop acting on a cluster that keeps failing, for a while.

closed --N consecutive server errors/unavailable--> open --cool-off elapsed--> half_open
half_open --one trial succeeds--> closed;  half_open --trial fails--> open again.
Client errors (4xx) are answers, not failures: they do not move the breaker.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from enum import StrEnum

from balancer.controller.clock import Clock

log = logging.getLogger(__name__)


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    cluster: str
    state: BreakerState
    consecutive_failures: int
    open_until_monotonic: float | None  # when the cool-off ends (clock.monotonic seconds)
    times_opened: int


class CircuitBreaker:
    def __init__(
        self, cluster: str, *, failure_threshold: int, cooloff_s: float, clock: Clock
    ) -> None:
        if failure_threshold < 1 or cooloff_s <= 0:
            raise ValueError("failure_threshold must be >= 1 and cooloff_s > 0")
        self.cluster = cluster
        self._threshold = failure_threshold
        self._cooloff_s = cooloff_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._open_until: float | None = None
        self._times_opened = 0
        self._trial_in_flight = False
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """Whether an action may go to the cluster now (half-open lets one trial through)."""
        with self._lock:
            if self._state is BreakerState.OPEN:
                assert self._open_until is not None
                if self._clock.monotonic() < self._open_until:
                    return False
                self._state = BreakerState.HALF_OPEN
                self._trial_in_flight = False
                log.info("circuit breaker for cluster %s is half-open: one trial", self.cluster)
            if self._state is BreakerState.HALF_OPEN:
                if self._trial_in_flight:
                    return False
                self._trial_in_flight = True
            return True

    def record_success(self) -> None:
        with self._lock:
            if self._state is not BreakerState.CLOSED:
                log.info("circuit breaker for cluster %s closed: it answers again", self.cluster)
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._open_until = None
            self._trial_in_flight = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self._threshold:
                self._open()

    def _open(self) -> None:
        self._state = BreakerState.OPEN
        self._open_until = self._clock.monotonic() + self._cooloff_s
        self._times_opened += 1
        self._trial_in_flight = False
        log.warning(
            "circuit breaker for cluster %s OPEN after %d consecutive failures: "
            "actions paused for %.0f s",
            self.cluster,
            self._failures,
            self._cooloff_s,
        )

    def status(self) -> BreakerStatus:
        with self._lock:
            return BreakerStatus(
                cluster=self.cluster,
                state=self._state,
                consecutive_failures=self._failures,
                open_until_monotonic=self._open_until,
                times_opened=self._times_opened,
            )


class Breakers:
    """One breaker per cluster, created on first use."""

    def __init__(self, *, failure_threshold: int, cooloff_s: float, clock: Clock) -> None:
        self._threshold = failure_threshold
        self._cooloff_s = cooloff_s
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def for_cluster(self, cluster: str) -> CircuitBreaker:
        with self._lock:
            breaker = self._breakers.get(cluster)
            if breaker is None:
                breaker = CircuitBreaker(
                    cluster,
                    failure_threshold=self._threshold,
                    cooloff_s=self._cooloff_s,
                    clock=self._clock,
                )
                self._breakers[cluster] = breaker
            return breaker

    def statuses(self) -> dict[str, BreakerStatus]:
        with self._lock:
            breakers = list(self._breakers.values())
        return {b.cluster: b.status() for b in breakers}
