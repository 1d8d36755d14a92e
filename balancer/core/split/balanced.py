"""balanced_flow_divide: split an overloaded bundle in one step into flow-equal children.

Targets are the bundle thresholds times `fill_factor`: topic count, sessions (producers +
consumers), msgRate (in + out) and throughput bytes (in + out); a threshold <= 0 is disabled
and has no target (the rule of `balancer.core.limits`; SplitOptions accepts it for sessions).
A child's weight is the largest of its shares of the targets, so weight <= 1 means "under
target" on every axis.

1. Topics are sorted by position; topics with the same position can never be separated and
   form one *unit* (their loads summed).
2. The child count k is the fewest such that every child is under target, except that a
   unit heavier than the target on its own gets a child of its own (an "outstanding
   partition", seed 000): it is allowed to be over, alone. A left-to-right greedy that packs
   each child as full as the target allows finds this minimum, because any contiguous part
   of an allowed child is itself allowed.
3. Among the splits with k children, one whose heaviest child is lightest: a binary search
   on a weight cap `c`, each step the same greedy (children of weight <= c, or a single
   unit). The greedy child count only falls as `c` grows, so the least `c` giving at most k
   children is the min-max cap (to a 1e-10 relative tolerance). The search starts at 0, not
   at total / k, because a unit over the cap alone does not bound the others.
   Then, rather than the greedy's "full, full, tiny", each child ends where its weight is
   nearest to an equal share of what is left, among the ends that keep it under `c` and the
   rest packable into the children left (known from a greedy packing from the right).
4. `max_children` (the namespace's remaining bundle budget) caps k; then step 3 minimises
   the heaviest child with at most that many children.

Boundaries follow Pulsar's midpoint rule `h[i-1] + (h[i] - h[i-1]) // 2 + 1` between the last
unit of one child (a) and the first unit of the next (b). It always lies in (a, b], so a stays
left and b right (a boundary equal to b is fine: lower bounds are inclusive), and it is above
the bundle's lower bound. It can only reach the bundle's upper bound in the last bundle of a
namespace, whose upper bound 0xffffffff is inclusive and can hold a topic: then we use
`0xfffffffe` when that still lies above a, and topics at 0xfffffffe and 0xffffffff, which no
boundary can separate, form one unit.

No split when: the bundle cannot be split (width <= 1), it is over no threshold (unless
`force`, which then asks for at least 2 children), it has fewer than 2 units, or
`max_children` < 2. Never more children than units.

Purely computational, with no side effects. Cost: O(n log n) for the sort, then about 40
greedy passes of O(k log n) each (numpy when k is close to n): about 0.2 s for 100,000
topics, 2 s for 1,000,000 (most of it reading the TopicLoad objects).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from balancer.core.bundles import BundleRange
from balancer.core.limits import Limit, LoadTotals, is_over
from balancer.core.load import TopicLoad
from balancer.core.split.columns import TopicColumns
from balancer.core.split.model import SplitError, SplitOptions

_DEFAULT = SplitOptions()
# Relative precision of the min-max cap found by the binary search.
_CAP_TOLERANCE = 1e-10
_CAP_SEARCH_STEPS = 80
# A scalar greedy pass costs O(k log n), a vectorised one O(n log n): vectorise only when
# the children are many compared with the units.
_VECTOR_GREEDY_MIN_UNITS_PER_CHILD = 16


@dataclass(frozen=True)
class Targets:
    """Per-child targets: each enabled threshold times the fill factor (disabled ones absent)."""

    by_limit: Mapping[Limit, float]

    @classmethod
    def from_options(cls, options: SplitOptions) -> Targets:
        f = options.fill_factor
        return cls({limit: maximum * f for limit, maximum in options.limits.enabled().items()})


def over_threshold(topics: TopicColumns, options: SplitOptions) -> bool:
    """Whether the bundle is over any of Pulsar's split thresholds (strictly, as Pulsar checks)."""
    totals = LoadTotals(
        topic_count=len(topics),
        session_count=int(topics.sessions.sum()),
        msg_rate=float(topics.msg_rate.sum()),
        throughput_bytes=float(topics.throughput_bytes.sum()),
    )
    return is_over(totals, options.limits)


class _Units:
    """Topics merged into inseparable units, sorted by position, as per-axis prefix sums."""

    def __init__(self, bundle: BundleRange, topics: TopicColumns, targets: Targets) -> None:
        ordered = topics.sorted_by_position()
        p = ordered.positions
        starts = np.flatnonzero(np.concatenate(([True], p[1:] != p[:-1])))
        if len(starts) >= 2 and _inseparable(bundle, int(p[starts[-2]]), int(p[starts[-1]])):
            starts = starts[:-1]
        self.positions: list[int] = p[starts].tolist()
        self.size = len(self.positions)
        counts = np.diff(np.append(starts, len(p))).astype(np.float64)
        per_topic = {
            Limit.SESSIONS: ordered.sessions.astype(np.float64),
            Limit.MSG_RATE: ordered.msg_rate,
            Limit.BANDWIDTH: ordered.throughput_bytes,
        }
        # One column per enabled limit: each unit's topic count, or its summed load.
        cols = [
            counts if limit is Limit.TOPICS else np.add.reduceat(per_topic[limit], starts)
            for limit in targets.by_limit
        ]
        self.limits = list(targets.by_limit.values())
        self.prefix = [np.concatenate(([0.0], np.cumsum(col))) for col in cols]
        self.prefix_lists = [prefix.tolist() for prefix in self.prefix]

    def greedy(self, cap: float, max_children: int | None = None) -> list[int] | None:
        """Start indexes of the greedy children under `cap`; None once over `max_children`."""
        if (
            max_children is not None
            and max_children * _VECTOR_GREEDY_MIN_UNITS_PER_CHILD > self.size
        ):
            return self._greedy_vector(cap, max_children)
        starts: list[int] = []
        i, m = 0, self.size
        while i < m:
            starts.append(i)
            if max_children is not None and len(starts) > max_children:
                return None
            i = self.reach(i, cap)
        return starts

    def _greedy_vector(self, cap: float, max_children: int) -> list[int] | None:
        m = self.size
        nxt = np.full(m, m, dtype=np.int64)
        for prefix, limit in zip(self.prefix, self.limits, strict=True):
            reach = np.searchsorted(prefix, prefix[:-1] + cap * limit, side="right") - 1
            np.minimum(nxt, reach, out=nxt)
        np.maximum(nxt, np.arange(1, m + 1), out=nxt)
        jumps = nxt.tolist()
        starts: list[int] = []
        i = 0
        while i < m:
            starts.append(i)
            if len(starts) > max_children:
                return None
            i = jumps[i]
        return starts

    def fits(self, start: int, end: int, cap: float) -> bool:
        """Whether units[start:end] weigh at most `cap` (the greedy's own comparison)."""
        return all(
            prefix[end] <= prefix[start] + cap * limit
            for prefix, limit in zip(self.prefix_lists, self.limits, strict=True)
        )

    def reach(self, start: int, cap: float) -> int:
        """The end of the longest child from `start` under `cap` (a unit alone always fits)."""
        end = self.size
        for prefix, limit in zip(self.prefix_lists, self.limits, strict=True):
            end = min(
                end, bisect.bisect_right(prefix, prefix[start] + cap * limit, start, end + 1) - 1
            )
        return max(end, start + 1)

    def reach_back(self, end: int, cap: float) -> int:
        """The start of the longest child ending at `end` under `cap`."""
        first = bisect.bisect_left(range(end), True, key=lambda s: self.fits(s, end, cap))
        return min(first, end - 1)

    def weight(self, start: int, end: int) -> float:
        """Weight of the child holding units[start:end]."""
        return max(
            float(prefix[end] - prefix[start]) / limit
            for prefix, limit in zip(self.prefix_lists, self.limits, strict=True)
        )

    def even(self, cap: float, k: int) -> list[int]:
        """k children under `cap`, each as close as it can be to an equal share of the rest.

        The plain greedy packs every child full and leaves the last one light ("full, full,
        tiny"). Here each child ends where its weight is nearest to (rest / children left),
        within what keeps the rest packable in the children left: packing greedily from the
        right gives, for r children, the leftmost start `earliest[r]` from which the rest
        still fits. Every child stays under `cap` (or is a single unit).
        """
        m = self.size
        earliest = [m]
        for _ in range(k - 1):
            earliest.append(max(self.reach_back(earliest[-1], cap), 0) if earliest[-1] else 0)
        starts: list[int] = []
        i = 0
        for left in range(k, 1, -1):
            starts.append(i)
            lo = max(i + 1, earliest[left - 1])
            hi = min(self.reach(i, cap), m - (left - 1))
            i = _nearest_end(self, i, lo, max(lo, hi), self.weight(i, m) / left)
        starts.append(i)
        return starts

    def total_weight(self) -> float:
        return max(
            float(prefix[-1]) / limit
            for prefix, limit in zip(self.prefix_lists, self.limits, strict=True)
        )


def _nearest_end(units: _Units, start: int, lo: int, hi: int, share: float) -> int:
    """The end in [lo, hi] whose child weight is nearest to `share` (weights rise with end)."""
    first_over = bisect.bisect_left(range(lo, hi + 1), share, key=lambda j: units.weight(start, j))
    candidates = [lo + first_over - 1, lo + first_over]
    valid = [j for j in candidates if lo <= j <= hi] or [hi]
    return min(valid, key=lambda j: abs(units.weight(start, j) - share))


def _inseparable(bundle: BundleRange, a: int, b: int) -> bool:
    """No boundary strictly inside the bundle puts a left and b right (only at 0xffffffff)."""
    return b == bundle.upper and b - a <= 1


def _boundary(bundle: BundleRange, a: int, b: int) -> int:
    """Pulsar's midpoint rule, kept strictly below the bundle's upper bound (see module doc)."""
    point = a + (b - a) // 2 + 1
    if point >= bundle.upper:
        point = bundle.upper - 1
    return point


def check_loads(topics: TopicColumns) -> None:
    """Loads must be finite and non-negative (validated events always are)."""
    for name, values in (
        ("msgRate", topics.msg_rate),
        ("throughput", topics.throughput_bytes),
    ):
        if not bool(np.isfinite(values).all()) or bool((values < 0).any()):
            raise SplitError(f"a topic has a negative or non-finite {name}")
    if bool((topics.sessions < 0).any()):
        raise SplitError("a topic has a negative producer or consumer count")


def balanced_flow_divide(
    bundle: BundleRange, topics: Sequence[TopicLoad], options: SplitOptions = _DEFAULT
) -> tuple[int, ...]:
    """The boundaries of the fewest, flow-equal children under target; `()` for no split."""
    return balanced_boundaries(bundle, TopicColumns.from_topics(topics).within(bundle), options)


def balanced_boundaries(
    bundle: BundleRange, topics: TopicColumns, options: SplitOptions
) -> tuple[int, ...]:
    """balanced_flow_divide on topic columns already restricted to the bundle."""
    check_loads(topics)
    if not bundle.splittable or len(topics) < 2:
        return ()
    if not options.force and not over_threshold(topics, options):
        return ()
    units = _Units(bundle, topics, Targets.from_options(options))
    limit = min(units.size, options.max_children or units.size)
    if limit < 2:
        return ()
    fewest = units.greedy(1.0)
    assert fewest is not None  # no child limit given
    k = min(max(len(fewest), 2), limit)
    starts = units.even(_min_max_cap(units, k), k)
    return tuple(_boundary(bundle, units.positions[s - 1], units.positions[s]) for s in starts[1:])


def _min_max_cap(units: _Units, k: int) -> float:
    """The least weight cap under which the greedy needs at most k children.

    The lower end starts at 0, not at total / k: a single unit is allowed over the cap, so
    the cap the other children need can be far below the average.
    """
    lo, hi = 0.0, units.total_weight()  # one child holds everything: always within k
    for _ in range(_CAP_SEARCH_STEPS):
        if hi - lo <= _CAP_TOLERANCE * hi:
            break
        mid = (lo + hi) / 2
        if units.greedy(mid, k) is None:
            lo = mid
        else:
            hi = mid
    return hi
