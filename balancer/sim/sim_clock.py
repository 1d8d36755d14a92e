"""Simulated time: advanced explicitly by tests, or following the wall clock scaled by a factor.

Nothing in the simulator reads the wall clock except through this class.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SimClock:
    """Simulated milliseconds since the epoch.

    `time_scale=0` (the default) is a manual clock: it moves only on `advance`. With
    `time_scale=60.0`, one real second is one simulated minute, on top of any `advance`.
    """

    def __init__(
        self,
        start_ms: int,
        *,
        time_scale: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        self._start_ms = start_ms
        self._offset_s = 0.0
        self._time_scale = time_scale
        self._monotonic = monotonic
        self._real_start_s = monotonic()
        self._lock = threading.Lock()

    @property
    def start_ms(self) -> int:
        return self._start_ms

    @property
    def time_scale(self) -> float:
        return self._time_scale

    def advance(self, seconds: float) -> None:
        """Move simulated time forward (never backward)."""
        if seconds < 0:
            raise ValueError(f"cannot advance the clock by a negative {seconds} s")
        with self._lock:
            self._offset_s += seconds

    def elapsed_s(self) -> float:
        """Simulated seconds since the scenario started."""
        with self._lock:
            scaled = (self._monotonic() - self._real_start_s) * self._time_scale
            return self._offset_s + scaled

    def now_ms(self) -> int:
        return self._start_ms + int(self.elapsed_s() * 1000)
