"""Split options and results shared by every split algorithm.

Purely computational, with no side effects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

import numpy as np

from balancer.core.bundles import BundleRange
from balancer.core.limits import (
    DEFAULT_MAX_BANDWIDTH_MBYTES,
    DEFAULT_MAX_MSG_RATE,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_TOPICS,
    BundleLimits,
)
from balancer.core.load import TopicLoad
from balancer.core.split.columns import TopicColumns

# SplitOptions carries BundleLimits' four fields under the same names.
_LIMIT_FIELDS = tuple(f.name for f in fields(BundleLimits))


class SplitAlgorithm(StrEnum):
    RANGE_EQUALLY_DIVIDE = "range_equally_divide"
    TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
    SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
    FLOW_OR_QPS_EQUALLY_DIVIDE = "flow_or_qps_equally_divide"
    BALANCED_FLOW_DIVIDE = "balanced_flow_divide"


class SplitError(ValueError):
    """A split request that cannot be answered (bad options, or boundaries Pulsar would reject)."""


@dataclass(frozen=True)
class SplitOptions:
    """Thresholds and knobs of the split algorithms; the defaults are Pulsar's.

    `max_sessions <= 0` disables the sessions threshold, as in Pulsar. `fill_factor` and
    `max_children` are used by balanced_flow_divide only, `positions` and `force` by
    specified_positions_divide (and `force` by balanced_flow_divide: split even when the
    bundle is under every threshold), `difference_threshold_pct` by flow_or_qps_equally_divide.
    """

    max_msg_rate: float = DEFAULT_MAX_MSG_RATE
    max_bandwidth_mbytes: float = DEFAULT_MAX_BANDWIDTH_MBYTES
    max_topics: int = DEFAULT_MAX_TOPICS
    max_sessions: int = DEFAULT_MAX_SESSIONS
    difference_threshold_pct: float = 10
    fill_factor: float = 0.8
    max_children: int | None = None
    positions: tuple[int, ...] = ()
    force: bool = False

    def __post_init__(self) -> None:
        for name in ("max_msg_rate", "max_bandwidth_mbytes", "max_topics"):
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                raise SplitError(f"{name} must be a positive number, got {value!r}")
        if not _finite(self.max_sessions):
            raise SplitError(f"max_sessions must be a number, got {self.max_sessions!r}")
        if not _finite(self.difference_threshold_pct) or self.difference_threshold_pct < 0:
            raise SplitError(
                f"difference_threshold_pct must be >= 0, got {self.difference_threshold_pct!r}"
            )
        if not _finite(self.fill_factor) or not 0 < self.fill_factor <= 1:
            raise SplitError(f"fill_factor must be in (0, 1], got {self.fill_factor!r}")
        if self.max_children is not None and (
            isinstance(self.max_children, bool)
            or not isinstance(self.max_children, int)
            or self.max_children < 1
        ):
            raise SplitError(f"max_children must be an integer >= 1, got {self.max_children!r}")

    @classmethod
    def from_limits(cls, limits: BundleLimits) -> SplitOptions:
        """Pulsar's defaults for every knob, with a namespace's four thresholds."""
        return cls(**{name: getattr(limits, name) for name in _LIMIT_FIELDS})

    @property
    def limits(self) -> BundleLimits:
        """The four thresholds, read by the rule of `balancer.core.limits`."""
        return BundleLimits(**{name: getattr(self, name) for name in _LIMIT_FIELDS})

    @property
    def max_bandwidth_bytes(self) -> float:
        """The bandwidth threshold in bytes/s (Pulsar's MiB, in + out)."""
        return self.limits.max_bandwidth_bytes


@dataclass(frozen=True)
class ChildLoad:
    """One child bundle of a split and the load of the topics that fall in it."""

    bundle: BundleRange
    topics: int
    msg_rate: float
    throughput_bytes: float
    sessions: int


@dataclass(frozen=True)
class SplitResult:
    """Boundaries `()` mean "no split"; `children` is then `(the parent,)`."""

    algorithm: SplitAlgorithm
    bundle: BundleRange
    boundaries: tuple[int, ...]
    children: tuple[ChildLoad, ...]

    @property
    def is_split(self) -> bool:
        return bool(self.boundaries)


def topics_in(bundle: BundleRange, topics: Iterable[TopicLoad]) -> list[TopicLoad]:
    """The topics whose position lies in the bundle (others are ignored by every algorithm)."""
    return [t for t in topics if bundle.contains(t.position)]


def child_loads(
    bundle: BundleRange, boundaries: Sequence[int], topics: TopicColumns
) -> tuple[ChildLoad, ...]:
    """The k+1 children of `bundle` cut at `boundaries` (sorted, strictly inside), with loads."""
    points = [bundle.lower, *boundaries, bundle.upper]
    k = len(points) - 1
    # A topic's child is the number of boundaries at or below it (lower bounds are inclusive).
    index = np.searchsorted(np.asarray(boundaries, dtype=np.int64), topics.positions, "right")
    counts = np.bincount(index, minlength=k).tolist()
    rates = np.bincount(index, weights=topics.msg_rate, minlength=k).tolist()
    throughputs = np.bincount(index, weights=topics.throughput_bytes, minlength=k).tolist()
    sessions = np.bincount(index, weights=topics.sessions, minlength=k).tolist()
    return tuple(
        ChildLoad(BundleRange(lo, hi), int(counts[i]), rates[i], throughputs[i], int(sessions[i]))
        for i, (lo, hi) in enumerate(itertools.pairwise(points))
    )


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
