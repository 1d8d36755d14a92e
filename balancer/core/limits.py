"""Load against limits: a bundle's (or a topic's) load as a share of each of its four limits.

The one place that states the rule every reader of a limit follows (the detector, the split
algorithms, the exporter, the live view, the benchmarks):
- The four limits of a bundle are Pulsar's `loadBalancerNamespaceBundleMax*`: topics,
  sessions (producers + consumers), msgRate (in + out, msg/s) and bandwidth (in + out,
  MiB * 1048576 bytes/s), in Pulsar's priority order Topics > Sessions > MsgRate > Bandwidth.
- A limit <= 0 is disabled: it has no ratio and nothing is ever over it (Pulsar does so for
  sessions; here it holds for all four).
- A load is over a limit when it strictly exceeds it (Pulsar compares with `>`); its ratio
  is load / limit, so a ratio > 1 always means over (at the very edge of float rounding a
  load just over its limit can have a ratio that rounds to exactly 1.0: `over_limits` is the
  test, ratios are for showing and ranking).

Purely computational, with no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from balancer.core.load import BundleLoad

MIB_BYTES = 1_048_576

# Pulsar's broker defaults.
DEFAULT_MAX_TOPICS = 1000
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_MSG_RATE = 30_000.0
DEFAULT_MAX_BANDWIDTH_MBYTES = 100.0


class Limit(StrEnum):
    """The four per-bundle limits of Pulsar's load manager, declared in its priority order."""

    TOPICS = "topics"
    SESSIONS = "sessions"
    MSG_RATE = "msg_rate"
    BANDWIDTH = "bandwidth"


LIMIT_PRIORITY: tuple[Limit, ...] = tuple(Limit)


@dataclass(frozen=True, slots=True)
class BundleLimits:
    """The four limits of one bundle. A limit <= 0 is disabled (Pulsar does so for sessions)."""

    max_topics: int = DEFAULT_MAX_TOPICS
    max_sessions: int = DEFAULT_MAX_SESSIONS  # producers + consumers
    max_msg_rate: float = DEFAULT_MAX_MSG_RATE  # msg/s, in + out
    max_bandwidth_mbytes: float = DEFAULT_MAX_BANDWIDTH_MBYTES  # MiB/s, in + out

    @property
    def max_bandwidth_bytes(self) -> float:
        """Bandwidth limit in bytes/s (Pulsar multiplies the MiB figure by 1048576)."""
        return self.max_bandwidth_mbytes * MIB_BYTES

    def enabled(self) -> dict[Limit, float]:
        """Each enabled limit in the units of `LoadTotals`, in priority order."""
        maxima = (
            (Limit.TOPICS, float(self.max_topics)),
            (Limit.SESSIONS, float(self.max_sessions)),
            (Limit.MSG_RATE, float(self.max_msg_rate)),
            (Limit.BANDWIDTH, float(self.max_bandwidth_bytes)),
        )
        return {limit: maximum for limit, maximum in maxima if maximum > 0}


@dataclass(frozen=True, slots=True)
class LoadTotals:
    """A load on the four limited axes, for loads that are not a `BundleLoad`.

    A topic alone, a split's child or a group of topics; an axis left at 0 is never over.
    """

    topic_count: float = 0
    session_count: float = 0  # producers + consumers
    msg_rate: float = 0.0  # msg/s, in + out
    throughput_bytes: float = 0.0  # bytes/s, in + out


Loaded = BundleLoad | LoadTotals


def load_on(load: Loaded, limit: Limit) -> float:
    """The load's figure on the axis of `limit` (in that limit's units)."""
    if limit is Limit.TOPICS:
        return float(load.topic_count)
    if limit is Limit.SESSIONS:
        return float(load.session_count)
    if limit is Limit.MSG_RATE:
        return float(load.msg_rate)
    return float(load.throughput_bytes)


def ratios(load: Loaded, limits: BundleLimits) -> dict[Limit, float]:
    """Each enabled limit's load / limit, in priority order (disabled limits are left out)."""
    return {limit: load_on(load, limit) / maximum for limit, maximum in limits.enabled().items()}


def max_ratio(load: Loaded, limits: BundleLimits) -> float:
    """The load as its largest share of any enabled limit (0.0 when every limit is disabled)."""
    return max(ratios(load, limits).values(), default=0.0)


def over_limits(load: Loaded, limits: BundleLimits) -> tuple[Limit, ...]:
    """The enabled limits the load strictly exceeds, in priority order (empty: under all)."""
    return tuple(
        limit for limit, maximum in limits.enabled().items() if load_on(load, limit) > maximum
    )


def is_over(load: Loaded, limits: BundleLimits) -> bool:
    """Whether the load strictly exceeds any enabled limit."""
    return bool(over_limits(load, limits))


def is_near(load: Loaded, limits: BundleLimits, min_ratio: float) -> bool:
    """Whether the load is over a limit or at least `min_ratio` of one (1.0: over only)."""
    return is_over(load, limits) or max_ratio(load, limits) >= min_ratio > 0
