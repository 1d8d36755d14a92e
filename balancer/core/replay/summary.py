"""The figures a replay report shows, computed from a `ReplayResult` alone (pure).

Per policy: actions (splits, moves, offloads, sessions moved), how long bundles and brokers
stayed over their limits (bundle-minutes, broker-minutes at or over 85 %), each overload and
how long the policy took to act on it; across policies: the hours where they differ most.

Definitions (docs/operations.md, "Reading a replay report", says the same to operators):
- A window's length is the gap between its end and the previous window's end, capped at
  `window_s` (a gap in the recording is not counted as overload time it cannot show); the
  first window's is the gap to the second (capped), or `window_s` alone. With sliding
  windows this counts each minute once, not once per window that covers it.
- Bundle-minutes over limits: the sum over windows of (bundles at or over 1.0) x length.
- Broker-minutes over 85 %: the sum over windows of (brokers whose load is at or over 0.85,
  Pulsar's `loadBalancerBrokerOverloadedThresholdPercentage`; OverloadShedder sheds when
  `currentUsage >= threshold`) x length.
- An overload: a run of consecutive windows in which one bundle (or broker) is over. It
  starts at the end of its first window (when the policy could first see it) and recovers
  at the end of the first window after the run (never, if the replay ends inside it).
- Its first action: the earliest action at or after the start and before the recovery that
  touches it. A bundle is touched by a split or move of that bundle. A broker is touched by
  a move off it, or by a split in its cluster (a split names no broker, and the result does
  not carry owners). Offloads move storage, not traffic, so they touch neither. An overload
  with no such action was never acted on.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from balancer.core.replay.result import (
    ActionKind,
    PolicyRun,
    ReplayAction,
    ReplayResult,
    WindowSample,
)

BROKER_OVERLOAD_RATIO = 0.85  # Pulsar's loadBalancerBrokerOverloadedThresholdPercentage / 100
BUNDLE_LIMIT_RATIO = 1.0
HOUR_MS = 3_600_000
TOP_HOURS = 5

SUBJECT_BUNDLE = "bundle"
SUBJECT_BROKER = "broker"


@dataclass(frozen=True, slots=True)
class Overload:
    """One run of windows in which a bundle or a broker was over."""

    subject_kind: str  # SUBJECT_BUNDLE or SUBJECT_BROKER
    subject: str  # `cluster/tenant/ns/0x.._0x..` or `cluster/broker`
    start_ms: int  # the end of its first window over
    last_ms: int  # the end of its last window over
    recovered_ms: int | None  # the end of the first window after it; None: still over
    peak: float  # the highest ratio it reached
    first_action_ms: int | None  # None: never acted on

    @property
    def time_to_action_s(self) -> float | None:
        if self.first_action_ms is None:
            return None
        return (self.first_action_ms - self.start_ms) / 1000.0


@dataclass(frozen=True, slots=True)
class ReactionFigures:
    """Overloads of one kind (bundles or brokers) and how fast the policy acted on them."""

    overloads: int
    acted_on: int
    never_acted_on: int
    median_time_to_action_s: float | None  # None when none was acted on
    max_time_to_action_s: float | None


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: str
    description: str
    splits: int
    moves: int
    offloads: int
    sessions_moved: int
    bundle_minutes_over: float
    broker_minutes_over: float
    peak_broker_load: float  # the highest broker load of any window (0.0: none)
    bundles_at_end: int  # the last window's bundle count (0: no window)
    bundle_reaction: ReactionFigures
    broker_reaction: ReactionFigures
    overloads: tuple[Overload, ...]  # bundles' then brokers', each by start


@dataclass(frozen=True, slots=True)
class HourFigures:
    """One policy in one hour."""

    policy: str
    bundle_minutes_over: float
    broker_minutes_over: float
    actions: int


@dataclass(frozen=True, slots=True)
class HourDifference:
    hour_start_ms: int
    score: float
    per_policy: tuple[HourFigures, ...]  # in the result's policy order


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    policies: tuple[PolicySummary, ...]  # in the result's policy order
    top_hours: tuple[HourDifference, ...]  # highest score first


def summarize(result: ReplayResult, top_hours: int = TOP_HOURS) -> ReplaySummary:
    return ReplaySummary(
        policies=tuple(summarize_run(run, result.window_s) for run in result.runs),
        top_hours=differing_hours(result, top_hours),
    )


def window_lengths_ms(windows: Sequence[WindowSample], window_s: int) -> list[int]:
    """Each window's length as the report counts it (module docstring)."""
    cap_ms = window_s * 1000
    ends = [w.window_end_ms for w in windows]
    lengths = [min(cap_ms, max(0, b - a)) for a, b in pairwise(ends)]
    if not ends:
        return []
    first = lengths[0] if lengths else cap_ms
    return [first, *lengths]


def _over_bundles(window: WindowSample) -> Mapping[str, float]:
    return {k: v for k, v in window.bundles_over.items() if v >= BUNDLE_LIMIT_RATIO}


def _over_brokers(window: WindowSample) -> Mapping[str, float]:
    return {k: v for k, v in window.broker_load.items() if v >= BROKER_OVERLOAD_RATIO}


def summarize_run(run: PolicyRun, window_s: int) -> PolicySummary:
    lengths = window_lengths_ms(run.windows, window_s)
    bundle_ms = sum(len(_over_bundles(w)) * n for w, n in zip(run.windows, lengths, strict=True))
    broker_ms = sum(len(_over_brokers(w)) * n for w, n in zip(run.windows, lengths, strict=True))
    overloads = find_overloads(run.windows, run.actions)
    kinds = [a.kind for a in run.actions]
    return PolicySummary(
        policy=run.policy,
        description=run.description,
        splits=kinds.count(ActionKind.SPLIT),
        moves=kinds.count(ActionKind.MOVE),
        offloads=kinds.count(ActionKind.OFFLOAD),
        sessions_moved=sum(a.sessions_moved for a in run.actions),
        bundle_minutes_over=bundle_ms / 60_000,
        broker_minutes_over=broker_ms / 60_000,
        peak_broker_load=max((v for w in run.windows for v in w.broker_load.values()), default=0.0),
        bundles_at_end=run.windows[-1].bundles if run.windows else 0,
        bundle_reaction=reaction([o for o in overloads if o.subject_kind == SUBJECT_BUNDLE]),
        broker_reaction=reaction([o for o in overloads if o.subject_kind == SUBJECT_BROKER]),
        overloads=overloads,
    )


def reaction(overloads: Sequence[Overload]) -> ReactionFigures:
    delays = [d for o in overloads if (d := o.time_to_action_s) is not None]
    return ReactionFigures(
        overloads=len(overloads),
        acted_on=len(delays),
        never_acted_on=len(overloads) - len(delays),
        median_time_to_action_s=float(statistics.median(delays)) if delays else None,
        max_time_to_action_s=max(delays) if delays else None,
    )


def _split_key(key: str) -> tuple[str, str]:
    cluster, _, rest = key.partition("/")
    return cluster, rest


class _ActionIndex:
    """The times of the actions that touch each subject (module docstring), sorted, so each
    overload finds its first action by bisection rather than by a scan of every action."""

    def __init__(self, actions: Iterable[ReplayAction]) -> None:
        self._times: dict[tuple[str, str], list[int]] = defaultdict(list)
        for a in actions:
            if a.kind in (ActionKind.SPLIT, ActionKind.MOVE):
                self._times[(SUBJECT_BUNDLE, f"{a.cluster}/{a.subject}")].append(a.at_ms)
            if a.kind == ActionKind.MOVE and a.source_broker is not None:
                self._times[(SUBJECT_BROKER, f"{a.cluster}/{a.source_broker}")].append(a.at_ms)
            if a.kind == ActionKind.SPLIT:
                self._times[("cluster", a.cluster)].append(a.at_ms)
        for times in self._times.values():
            times.sort()

    def _first(self, key: tuple[str, str], from_ms: int) -> int | None:
        times = self._times.get(key, [])
        i = bisect_left(times, from_ms)
        return times[i] if i < len(times) else None

    def first_touch(
        self, kind: str, subject: str, from_ms: int, before_ms: int | None
    ) -> int | None:
        """The first action touching the subject at or after `from_ms`, before `before_ms`."""
        found = [self._first((kind, subject), from_ms)]
        if kind == SUBJECT_BROKER:
            found.append(self._first(("cluster", _split_key(subject)[0]), from_ms))
        times = [t for t in found if t is not None and (before_ms is None or t < before_ms)]
        return min(times, default=None)


def _runs(over: Iterable[tuple[int, Mapping[str, float]]]) -> list[tuple[str, int, int, float]]:
    """(subject, first index, last index, peak) of each run of consecutive windows over."""
    open_runs: dict[str, tuple[int, int, float]] = {}
    done: list[tuple[str, int, int, float]] = []
    for index, subjects in over:
        for subject, ratio in subjects.items():
            first, last, peak = open_runs.get(subject, (index, index, ratio))
            if last < index - 1:  # the previous run ended: close it, start a new one
                done.append((subject, first, last, peak))
                first, peak = index, ratio
            open_runs[subject] = (first, index, max(peak, ratio))
    done.extend((s, first, last, peak) for s, (first, last, peak) in open_runs.items())
    return done


def find_overloads(
    windows: Sequence[WindowSample], actions: Sequence[ReplayAction]
) -> tuple[Overload, ...]:
    """Every overload of a bundle or broker, with its first action (module docstring)."""
    index = _ActionIndex(actions)
    found: list[Overload] = []
    for kind, over_of in (
        (SUBJECT_BUNDLE, _over_bundles),
        (SUBJECT_BROKER, _over_brokers),
    ):
        runs = _runs(((i, over_of(w)) for i, w in enumerate(windows)))
        for subject, first, last, peak in sorted(runs, key=lambda r: (r[1], r[0])):
            start_ms = windows[first].window_end_ms
            recovered = windows[last + 1].window_end_ms if last + 1 < len(windows) else None
            action_ms = index.first_touch(kind, subject, start_ms, recovered)
            found.append(
                Overload(
                    subject_kind=kind,
                    subject=subject,
                    start_ms=start_ms,
                    last_ms=windows[last].window_end_ms,
                    recovered_ms=recovered,
                    peak=peak,
                    first_action_ms=action_ms,
                )
            )
    return tuple(found)


def hour_of(at_ms: int) -> int:
    """The start of the UTC hour holding `at_ms` (epoch hours are UTC hours)."""
    return at_ms - at_ms % HOUR_MS


def hour_figures(run: PolicyRun, window_s: int) -> dict[int, HourFigures]:
    """Per hour (by window end, and by action time), the policy's figures in that hour."""
    bundle_ms: dict[int, int] = defaultdict(int)
    broker_ms: dict[int, int] = defaultdict(int)
    actions: dict[int, int] = defaultdict(int)
    lengths = window_lengths_ms(run.windows, window_s)
    for window, length in zip(run.windows, lengths, strict=True):
        hour = hour_of(window.window_end_ms)
        bundle_ms[hour] += len(_over_bundles(window)) * length
        broker_ms[hour] += len(_over_brokers(window)) * length
    for action in run.actions:
        actions[hour_of(action.at_ms)] += 1
    return {
        hour: HourFigures(
            policy=run.policy,
            bundle_minutes_over=bundle_ms.get(hour, 0) / 60_000,
            broker_minutes_over=broker_ms.get(hour, 0) / 60_000,
            actions=actions.get(hour, 0),
        )
        for hour in bundle_ms.keys() | broker_ms.keys() | actions.keys()
    }


def _spread(values: Sequence[float]) -> float:
    return max(values) - min(values) if values else 0.0


def differing_hours(result: ReplayResult, top: int = TOP_HOURS) -> tuple[HourDifference, ...]:
    """The `top` hours where the policies differ most, highest score first (then earliest).

    Score of an hour = (the highest minus the lowest broker-minutes over 85 % of any policy
    in it) + (the same spread of bundle-minutes over limits) + (the spread of the number of
    actions taken in it). Minutes over and actions count alike: one more action is worth one
    more minute of one broker overloaded. Hours with a score of 0 (the policies agree, or
    only one policy ran) are left out.
    """
    per_run = [hour_figures(run, result.window_s) for run in result.runs]
    hours = sorted(set().union(*(figures.keys() for figures in per_run)))
    ranked: list[HourDifference] = []
    for hour in hours:
        cells = tuple(
            figures.get(hour, HourFigures(run.policy, 0.0, 0.0, 0))
            for run, figures in zip(result.runs, per_run, strict=True)
        )
        score = (
            _spread([c.broker_minutes_over for c in cells])
            + _spread([c.bundle_minutes_over for c in cells])
            + _spread([float(c.actions) for c in cells])
        )
        if score > 0:
            ranked.append(HourDifference(hour_start_ms=hour, score=score, per_policy=cells))
    ranked.sort(key=lambda d: (-d.score, d.hour_start_ms))
    return tuple(ranked[:top])
