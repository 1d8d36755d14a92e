"""When and how long to wait before trying an admin call again.

Exponential backoff with full jitter: before retry n (1-based) wait a uniform random time in
`[0, min(max_delay_s, base_delay_s * 2**(n-1))]`, so many balancers hitting one broker spread
out. Only failures that may pass are retried: no answer at all (connection error, timeout),
429 and 5xx; other 4xx mean the request itself is wrong. Purely computational: the random
source is passed in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# 2**62 seconds is already "forever"; capping the exponent keeps the float finite.
_MAX_EXPONENT = 62


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries: `max_attempts` counts the first try (1 = never retry)."""

    max_attempts: int = 4
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("base_delay_s", "max_delay_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    def ceiling_s(self, retry_number: int) -> float:
        """The largest wait before retry `retry_number` (1 for the first retry)."""
        if retry_number < 1:
            raise ValueError(f"retry_number must be >= 1, got {retry_number}")
        exponent = min(retry_number - 1, _MAX_EXPONENT)
        return min(self.max_delay_s, self.base_delay_s * 2.0**exponent)

    def delay_s(
        self, retry_number: int, rng: random.Random, *, retry_after_s: float | None = None
    ) -> float:
        """Full-jitter wait before retry `retry_number`; a server's Retry-After is a floor.

        Retry-After is honoured up to `max_delay_s`, so a hostile header cannot stall us.
        """
        delay = rng.uniform(0.0, self.ceiling_s(retry_number))
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.max_delay_s))
        return delay


def is_retryable_status(status: int) -> bool:
    """429 and 5xx may pass; any other status will not change by asking again."""
    return status == 429 or 500 <= status <= 599


def parse_retry_after_s(value: str | None) -> float | None:
    """Retry-After in delta-seconds; HTTP dates and garbage are ignored (None)."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        return None
    return float(int(text))
