"""Time for the controller, injected so tests use a fake clock and never sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back (rate limits, breaker)."""
        ...

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (journal, audit log, cooldowns)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A manual clock for tests: moves only on `advance`."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._ms = start_ms
        self._mono_s = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._mono_s += seconds
        self._ms += round(seconds * 1000)

    def monotonic(self) -> float:
        return self._mono_s

    def now_ms(self) -> int:
        return self._ms
