"""The shared model of `bench.reaction_time`: stats samples of a scenario after a calm
warm-up, bundle loads from them, and the timeline a schedule leaves (when the first sample
was over threshold, when it split, when every bundle settled under threshold)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.detect import over_threshold
from balancer.core.limits import BundleLimits
from balancer.core.load import BundleLoad, TopicLoad
from balancer.sim.scenarios import Scenario
from balancer.sim.traffic import TrafficModel

FloatArray = npt.NDArray[np.float64]
LIMITS = BundleLimits()

# "Settled" must hold for the last 10 simulated minutes followed, or it does not count.
SETTLE_MARGIN_S = 600.0


@dataclass(frozen=True)
class NamespaceTopics:
    """One namespace's topics sorted by hash position, with their static facts."""

    index: int
    name: str
    cluster: str
    table_index: npt.NDArray[np.int64]  # into the traffic model's topic table
    positions: npt.NDArray[np.int64]
    sessions: npt.NDArray[np.int64]
    names: tuple[str, ...]
    initial: NamespaceBundles

    def slice_of(self, bundle: BundleRange) -> slice:
        lo = int(np.searchsorted(self.positions, bundle.lower, side="left"))
        # 0xffffffff itself belongs to the last bundle.
        if bundle.is_last:
            hi = int(np.searchsorted(self.positions, bundle.upper, side="right"))
        else:
            hi = int(np.searchsorted(self.positions, bundle.upper, side="left"))
        return slice(lo, hi)


@dataclass(frozen=True)
class Sample:
    """One stats sample: every topic's rates at `t_s`."""

    t_s: float
    rates: tuple[FloatArray, FloatArray, FloatArray, FloatArray]  # in, out, bytes in, out


class Sampler:
    """Stats samples of a scenario, after a calm warm-up (see the module doc)."""

    def __init__(self, scenario: Scenario, *, warmup_s: float = 0.0, calm: float = 1.0) -> None:
        self.scenario = scenario
        self.warmup_s = warmup_s
        self.calm = calm
        self.traffic = TrafficModel(scenario)
        table = self.traffic.table
        self.namespaces: list[NamespaceTopics] = []
        for n, spec in enumerate(scenario.namespaces):
            idx = np.flatnonzero(table.namespace_index == n)
            idx = idx[np.argsort(table.positions[idx], kind="stable")]
            self.namespaces.append(
                NamespaceTopics(
                    index=n,
                    name=spec.name,
                    cluster=spec.cluster,
                    table_index=idx,
                    positions=table.positions[idx],
                    sessions=table.producers[idx]
                    + table.subscriptions[idx] * table.consumers_per_subscription[idx],
                    names=tuple(table.full_names[int(i)] for i in idx),
                    initial=NamespaceBundles.initial(spec.name, spec.bundles),
                )
            )

    def rates(self, t_s: float) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        if t_s < self.warmup_s:
            r = self.traffic.rates(0.0)
            c = self.calm
            return (
                r.msg_rate_in * c,
                r.msg_rate_out * c,
                r.throughput_in * c,
                r.throughput_out * c,
            )
        r = self.traffic.rates(t_s - self.warmup_s)
        return (r.msg_rate_in, r.msg_rate_out, r.throughput_in, r.throughput_out)


def bundle_load(
    ns: NamespaceTopics,
    bundle: BundleRange,
    samples: Sequence[Sample],
    window_end_ms: int,
    *,
    with_topics: bool,
) -> BundleLoad:
    """The bundle's load averaged over `samples` (each topic's rates averaged)."""
    part = ns.slice_of(bundle)
    rows = ns.table_index[part]
    means = [
        np.mean([s.rates[axis][rows] for s in samples], axis=0) if len(rows) else np.zeros(0)
        for axis in range(4)
    ]
    count = len(rows)
    load = BundleLoad(
        cluster=ns.cluster,
        namespace=ns.name,
        bundle=bundle,
        window_end_ms=window_end_ms,
        msg_rate_in=float(means[0].sum()),
        msg_rate_out=float(means[1].sum()),
        msg_throughput_in=float(means[2].sum()),
        msg_throughput_out=float(means[3].sum()),
        topic_count=count,
        session_count=int(ns.sessions[part].sum()),
        reported_topics=count,
        known_topics=count,
    )
    if not with_topics:
        return load
    sessions = ns.sessions[part].tolist()
    topics = tuple(
        TopicLoad(
            topic=ns.names[part.start + j],
            position=int(ns.positions[part.start + j]),
            msg_rate_in=float(means[0][j]),
            msg_rate_out=float(means[1][j]),
            msg_throughput_in=float(means[2][j]),
            msg_throughput_out=float(means[3][j]),
            producer_count=int(sessions[j]),  # producers + consumers; only the sum is used
        )
        for j in range(count)
    )
    return replace(load, topics=topics)


def stuck(load: BundleLoad) -> bool:
    """Over threshold but holding a single topic: no split can help."""
    return load.topic_count < 2


def over_state(
    sampler: Sampler, layouts: Sequence[NamespaceBundles], sample: Sample
) -> tuple[int, int]:
    """(bundles over threshold, of which lone topics) for a layout on one sample's rates."""
    over = lone = 0
    for ns in sampler.namespaces:
        for bundle in layouts[ns.index].bundles:
            load = bundle_load(ns, bundle, [sample], 0, with_topics=False)
            if over_threshold(load, LIMITS):
                over += 1
                lone += stuck(load)
    return over, lone


@dataclass
class Timeline:
    """What one schedule did, in simulated seconds."""

    schedule: str
    first_over_s: float | None = None
    first_split_s: float | None = None
    settled_s: float | None = None  # from then on every bundle under (or a lone topic)
    lone_topics: int = 0  # bundles left over threshold holding one topic
    splits: int = 0
    children: int = 0
    stale: int = 0
    rate_limited: int = 0
    split_times: list[float] = field(default_factory=list)
    over_bundle_s: float = 0.0  # time x bundles over threshold that a split could help
    end_s: float = 0.0  # the last sample followed

    def finish(self, end_s: float, settle_margin_s: float) -> None:
        """A layout counts as settled only if it stayed so for the last `settle_margin_s`."""
        self.end_s = end_s
        if self.settled_s is not None and self.settled_s > end_s - settle_margin_s:
            self.settled_s, self.lone_topics = None, 0

    def row(self, scenario: str, horizon_s: float) -> list[object]:
        if self.first_over_s is None:
            return [scenario, self.schedule, "no overload", "-", "-", "0", 0, 0]
        t0 = self.first_over_s
        return [
            scenario,
            self.schedule,
            f"{t0:.0f} s",
            _after(self.first_split_s, t0, horizon_s),
            _after(self.settled_s, t0, horizon_s)
            + (f" ({self.lone_topics} lone topic(s) over)" if self.lone_topics else ""),
            f"{self.over_bundle_s / 60:.0f}",
            self.splits,
            self.children,
        ]

    def as_json(self) -> dict[str, Any]:
        t0 = self.first_over_s
        return {
            "first_over_s": t0,
            "to_first_split_s": None
            if t0 is None or self.first_split_s is None
            else self.first_split_s - t0,
            "to_settled_s": None if t0 is None or self.settled_s is None else self.settled_s - t0,
            "lone_topics": self.lone_topics,
            "over_bundle_minutes": self.over_bundle_s / 60,
            "splits": self.splits,
            "children": self.children,
            "stale": self.stale,
            "rate_limited": self.rate_limited,
        }


def _after(t: float | None, t0: float, horizon_s: float) -> str:
    if t is None:
        return f"> {horizon_s / 60:.0f} min"
    return f"+{t - t0:.0f} s"


class Settling:
    """Tracks the first overloaded sample and when the layout settled for good."""

    def __init__(self, timeline: Timeline, interval_s: float) -> None:
        self.timeline = timeline
        self.interval_s = interval_s

    def observe(self, t_s: float, over: int, lone: int, *, before_splits: bool) -> None:
        tl = self.timeline
        if before_splits and tl.first_over_s is None and over > 0:
            tl.first_over_s = t_s
        if before_splits and tl.first_over_s is not None:
            # Until the next sample the layout stays as it is now, unless a split comes
            # first: counted per sample, so a split between samples still counts its wait.
            tl.over_bundle_s += (over - lone) * self.interval_s
        if tl.first_over_s is None:
            return
        settled = over == lone
        if settled and tl.settled_s is None:
            tl.settled_s, tl.lone_topics = t_s, lone
        elif not settled:
            tl.settled_s, tl.lone_topics = None, 0


def record_split(timeline: Timeline, t_s: float, children: int) -> None:
    if timeline.first_split_s is None:
        timeline.first_split_s = t_s
    timeline.splits += 1
    timeline.children += children
    timeline.split_times.append(t_s)


def window_loads(
    sampler: Sampler, layouts: Sequence[NamespaceBundles], window: Sequence[Sample], end_ms: int
) -> list[BundleLoad]:
    """The window's per-topic averages rolled up with the current layouts (as the stream's
    batch step does), only bundles with topics."""
    loads: list[BundleLoad] = []
    for ns in sampler.namespaces:
        for bundle in layouts[ns.index].bundles:
            load = bundle_load(ns, bundle, window, end_ms, with_topics=False)
            if load.topic_count == 0:
                continue  # a bundle without topics reports nothing
            if over_threshold(load, LIMITS):
                load = bundle_load(ns, bundle, window, end_ms, with_topics=True)
            loads.append(load)
    return loads
