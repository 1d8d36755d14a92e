"""One closed window as a replay hands it to every policy: each topic's windowed load with
the broker that reported it, grouped by namespace and sorted by hash position (built once per
window and shared by all policies, so a policy only slices it by its own bundles), and the
newest round context of each cluster (the recorded load reports and layout).

A namespace's topics are held as columns (numpy, position-sorted, as the stream's closed rows
come), not as one object per topic: building a `TopicLoad` per topic of every window was half
a replay's time after its first batch (docs/benchmarks.md#replay). A bundle rolls up by exact
sums over its slice of the columns, the same sums `roll_up` makes (`balancer.core.exact_sums`)
and so bit for bit its `BundleLoad`; topic objects are built only for a bundle asked for topic
by topic (a split's boundaries, a load correction spanning recorded bundles).

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.exact_sums import exact_sum, grouped_int_sums
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.replay.recording import RoundContext
from balancer.core.topics import InvalidTopicName, TopicDomain, parse_topic

_DOMAINS = tuple(f"{d.value}://" for d in TopicDomain)

# `TopicLoad`'s fields after its name and position, in its order: the rates (float64) then
# the counts and sizes (int64).
RATE_COLUMNS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
COUNT_COLUMNS = (
    "producer_count",
    "consumer_count",
    "storage_size",
    "backlog_size",
    "offloaded_storage_size",
)
LOAD_COLUMNS = (*RATE_COLUMNS, *COUNT_COLUMNS)

IntArray = npt.NDArray[np.int64]
NamespaceLoads = tuple[BundleLoad | None, ...]  # per bundle of a layout, None: no topics


@dataclass(frozen=True, slots=True)
class WindowTopic:
    """A topic's load over the window, as the recording has it."""

    cluster: str
    load: TopicLoad
    broker: str  # the broker whose stats reported the topic in the window


@dataclass(frozen=True, eq=False)
class NamespaceWindow:
    """One namespace's topics in the window as columns sorted by hash position (`of_columns`
    checks the order), each topic's values at the same index of every column."""

    cluster: str
    namespace: str  # tenant/ns
    names: Sequence[str]  # full topic names
    positions: IntArray
    columns: Mapping[str, npt.NDArray[np.float64] | IntArray]  # LOAD_COLUMNS -> values
    brokers: Sequence[str]  # the broker each topic is taken to have reported from

    @classmethod
    def of_columns(
        cls,
        cluster: str,
        namespace: str,
        *,
        names: Sequence[str],
        positions: npt.ArrayLike,
        columns: Mapping[str, npt.ArrayLike],
        brokers: Sequence[str],
    ) -> NamespaceWindow:
        """From columns already sorted by position (ValueError otherwise: a bundle's slice
        of unsorted columns would hold the wrong topics)."""
        missing = set(LOAD_COLUMNS) - set(columns)
        if missing:
            raise ValueError(f"{cluster}/{namespace}: no columns {sorted(missing)}")
        pos = np.asarray(positions, dtype=np.int64)
        cols: dict[str, npt.NDArray[np.float64] | IntArray] = {
            name: np.asarray(columns[name], dtype=np.float64) for name in RATE_COLUMNS
        }
        cols.update({name: np.asarray(columns[name], dtype=np.int64) for name in COUNT_COLUMNS})
        n = len(pos)
        if len(names) != n or len(brokers) != n or any(len(c) != n for c in cols.values()):
            raise ValueError(f"{cluster}/{namespace}: columns of unequal length")
        if n > 1 and bool((pos[1:] < pos[:-1]).any()):
            raise ValueError(f"{cluster}/{namespace}: topics not sorted by position")
        return cls(cluster, namespace, names, pos, cols, brokers)

    @classmethod
    def of_topics(
        cls, cluster: str, namespace: str, topics: Iterable[WindowTopic]
    ) -> NamespaceWindow:
        """From topic objects (tests, small windows): sorted by (position, name)."""
        members = sorted(topics, key=lambda t: (t.load.position, t.load.topic))
        return cls.of_columns(
            cluster,
            namespace,
            names=[t.load.topic for t in members],
            positions=[t.load.position for t in members],
            columns={name: [getattr(t.load, name) for t in members] for name in LOAD_COLUMNS},
            brokers=[t.broker for t in members],
        )

    def __len__(self) -> int:
        return len(self.names)

    def bounds(self, bundle: BundleRange) -> tuple[int, int]:
        """The slice of the topics whose position lies in `bundle` (NamespaceBundles.find:
        0xffffffff in the last bundle)."""
        lo = int(np.searchsorted(self.positions, bundle.lower, side="left"))
        if bundle.is_last:
            hi = int(np.searchsorted(self.positions, bundle.upper, side="right"))
        else:
            hi = int(np.searchsorted(self.positions, bundle.upper, side="left"))
        return lo, hi

    def in_bundle(self, bundle: BundleRange) -> tuple[WindowTopic, ...]:
        """The topics in `bundle`, as objects (built on each call: ask only where needed)."""
        return self._topics(*self.bounds(bundle))

    @property
    def topics(self) -> tuple[WindowTopic, ...]:
        """Every topic, as objects (built on each call)."""
        return self._topics(0, len(self))

    def _topics(self, lo: int, hi: int) -> tuple[WindowTopic, ...]:
        if lo >= hi:
            return ()
        # tolist: Python ints and floats, as a TopicLoad decoded from the rows holds.
        values = [self.columns[name][lo:hi].tolist() for name in LOAD_COLUMNS]
        names = self.names[lo:hi]
        positions = self.positions[lo:hi].tolist()
        brokers = self.brokers[lo:hi]
        return tuple(
            WindowTopic(self.cluster, TopicLoad(name, position, *load), broker)
            for name, position, broker, *load in zip(
                names, positions, brokers, *values, strict=True
            )
        )

    def roll_up(self, bundle: BundleRange, window_end_ms: int) -> BundleLoad | None:
        """`roll_up` of the topics in `bundle` (None when it has none), by the same exact
        sums over the columns' slice; its `topics` are not attached (`in_bundle`)."""
        lo, hi = self.bounds(bundle)
        if lo >= hi:
            return None
        rates = [exact_sum(self.columns[name][lo:hi].tolist()) for name in RATE_COLUMNS]
        # Python ints, as roll_up's sum of each topic's sessions: exact whatever their size.
        sessions = sum(self.columns["producer_count"][lo:hi].tolist()) + sum(
            self.columns["consumer_count"][lo:hi].tolist()
        )
        return BundleLoad(
            cluster=self.cluster,
            namespace=self.namespace,
            bundle=bundle,
            window_end_ms=window_end_ms,
            msg_rate_in=rates[0],
            msg_rate_out=rates[1],
            msg_throughput_in=rates[2],
            msg_throughput_out=rates[3],
            topic_count=hi - lo,
            session_count=sessions,
            reported_topics=hi - lo,
            known_topics=hi - lo,
        )

    def cuts(self, layout: NamespaceBundles) -> list[int]:
        """`bounds` of every bundle of `layout` at once: bundle i is the slice
        [cuts[i], cuts[i + 1])."""
        boundaries = np.asarray(layout.boundaries, dtype=np.int64)
        cuts = np.searchsorted(self.positions, boundaries, side="left")
        # NamespaceBundles.find: 0xffffffff belongs to the last bundle.
        cuts[-1] = np.searchsorted(self.positions, boundaries[-1], side="right")
        out: list[int] = cuts.tolist()
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NamespaceWindow):
            return NotImplemented
        return (self.cluster, self.namespace, self.topics) == (
            other.cluster,
            other.namespace,
            other.topics,
        )

    __hash__ = None  # type: ignore[assignment]  # equal by content, which may change


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """A closed window: the topics' loads and each cluster's newest round context."""

    window_end_ms: int
    namespaces: Mapping[tuple[str, str], NamespaceWindow]  # (cluster, tenant/ns) -> topics
    contexts: Mapping[str, RoundContext]  # cluster -> newest round at or before the end
    # Topics whose name is no topic name (the stream parsed them, so none are expected):
    # counted here rather than placed in a guessed namespace.
    rejected_topics: int = 0
    # Shared by every policy's layout in this window (they mostly have the same bundles):
    # bundle loads rolled up once, a namespace's bundles at once per layout of it.
    _bundle_loads: dict[tuple[str, str, BundleRange], BundleLoad | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _namespace_loads: dict[tuple[str, str, tuple[int, ...]], NamespaceLoads] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def build(
        cls,
        window_end_ms: int,
        topics: Iterable[WindowTopic],
        contexts: Mapping[str, RoundContext],
    ) -> ReplayWindow:
        grouped: dict[tuple[str, str], list[WindowTopic]] = {}
        rejected = 0
        for topic in topics:
            namespace = _namespace_of(topic.load.topic)
            if namespace is None:
                rejected += 1
                continue
            grouped.setdefault((topic.cluster, namespace), []).append(topic)
        window = cls.from_namespaces(window_end_ms, grouped, contexts)
        return cls(window.window_end_ms, window.namespaces, window.contexts, rejected)

    @classmethod
    def from_namespaces(
        cls,
        window_end_ms: int,
        grouped: Mapping[tuple[str, str], Iterable[WindowTopic]],
        contexts: Mapping[str, RoundContext],
    ) -> ReplayWindow:
        """From topics already grouped by (cluster, tenant/ns), as an engine that grouped
        them itself hands them (no name is parsed; each group is sorted by position)."""
        namespaces = {
            key: NamespaceWindow.of_topics(key[0], key[1], grouped[key]) for key in sorted(grouped)
        }
        return cls(window_end_ms, namespaces, dict(contexts))

    def topics(self) -> Iterable[WindowTopic]:
        for ns in self.namespaces.values():
            yield from ns.topics

    def bundle_load(self, cluster: str, namespace: str, bundle: BundleRange) -> BundleLoad | None:
        """The window's topics in `bundle` rolled up (`roll_up`'s sums, its topics not
        attached: `topic_loads_in`), None when it has none."""
        key = (cluster, namespace, bundle)
        if key in self._bundle_loads:
            return self._bundle_loads[key]
        nsw = self.namespaces.get((cluster, namespace))
        load = nsw.roll_up(bundle, self.window_end_ms) if nsw is not None else None
        self._bundle_loads[key] = load
        return load

    def namespace_loads(
        self, cluster: str, namespace: str, layout: NamespaceBundles
    ) -> NamespaceLoads:
        """`bundle_load` of every bundle of `layout` (of `namespace` in `cluster`), in its
        order: rolled up once per window and layout (`roll_up_all`)."""
        key = (cluster, namespace, layout.boundaries)
        loads = self._namespace_loads.get(key)
        if loads is None:
            self.roll_up_all([(cluster, namespace, layout)])
            loads = self._namespace_loads[key]
        return loads

    def roll_up_all(self, wanted: Iterable[tuple[str, str, NamespaceBundles]]) -> None:
        """Roll up every (cluster, namespace, layout) not rolled up yet in this window, all
        in one pass (`roll_ups`): a policy's layout asks for all its namespaces at once."""
        segments: list[tuple[NamespaceWindow, NamespaceBundles]] = []
        keys: dict[tuple[str, str, tuple[int, ...]], None] = {}  # a layout asked twice: once
        for cluster, namespace, layout in wanted:
            key = (cluster, namespace, layout.boundaries)
            if key in self._namespace_loads or key in keys:
                continue
            nsw = self.namespaces.get((cluster, namespace))
            if nsw is None or len(nsw) == 0:
                self._namespace_loads[key] = (None,) * layout.num_bundles
                continue
            segments.append((nsw, layout))
            keys[key] = None
        if segments:
            for key, loads in zip(keys, roll_ups(segments, self.window_end_ms), strict=True):
                self._namespace_loads[key] = loads

    def topic_loads_in(
        self, cluster: str, namespace: str, bundle: BundleRange
    ) -> tuple[TopicLoad, ...]:
        """The loads of the window's topics in `bundle`, in position order (built now)."""
        nsw = self.namespaces.get((cluster, namespace))
        return tuple(t.load for t in nsw.in_bundle(bundle)) if nsw is not None else ()


def roll_ups(
    segments: Sequence[tuple[NamespaceWindow, NamespaceBundles]], window_end_ms: int
) -> list[NamespaceLoads]:
    """`roll_up` of every bundle of each (namespace, layout of it), in the layout's order,
    in one pass over the columns of them all (a few conversions per window, not per bundle):
    each rate's `exact_sum` over every bundle's slice, bit for bit `roll_up`'s."""
    # The segments' columns end to end; each bundle a group of them, and the topics outside
    # every bundle of a segment (none expected: positions are 32-bit) groups of their own.
    bounds = [0]
    firsts: list[int] = []  # the group of each segment's first bundle
    offset = 0
    for nsw, layout in segments:
        cuts = [offset + c for c in nsw.cuts(layout)]
        if cuts[0] != bounds[-1]:
            bounds.append(cuts[0])
        firsts.append(len(bounds) - 1)
        bounds += cuts[1:]
        offset += len(nsw)
    if bounds[-1] != offset:
        bounds.append(offset)

    def joined(name: str, dtype: type[np.float64] | type[np.int64]) -> npt.NDArray[np.generic]:
        parts = [nsw.columns[name] for nsw, _ in segments]
        # The columns already hold `dtype` (`of_columns`): no conversion, one copy at most.
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(dtype, copy=False)

    rates = [_grouped_sums(joined(name, np.float64), bounds) for name in RATE_COLUMNS]
    producers = grouped_int_sums(joined("producer_count", np.int64), bounds)
    consumers = grouped_int_sums(joined("consumer_count", np.int64), bounds)
    out: list[NamespaceLoads] = []
    for (nsw, layout), first in zip(segments, firsts, strict=True):
        loads: list[BundleLoad | None] = []
        for g, bundle in enumerate(layout.bundles, start=first):
            topics = bounds[g + 1] - bounds[g]
            loads.append(
                BundleLoad(
                    cluster=nsw.cluster,
                    namespace=nsw.namespace,
                    bundle=bundle,
                    window_end_ms=window_end_ms,
                    msg_rate_in=rates[0][g],
                    msg_rate_out=rates[1][g],
                    msg_throughput_in=rates[2][g],
                    msg_throughput_out=rates[3][g],
                    topic_count=topics,
                    session_count=producers[g] + consumers[g],
                    reported_topics=topics,
                    known_topics=topics,
                )
                if topics > 0
                else None
            )
        out.append(tuple(loads))
    return out


def _grouped_sums(column: npt.NDArray[np.generic], bounds: list[int]) -> list[float]:
    """`exact_sum` of each slice `column[bounds[i]:bounds[i + 1]]`: `math.fsum` of each slice
    of one list of the column (one conversion per window, not per bundle). Measured faster
    than `exact_sums.grouped_exact_parts` here (its bins and parts cost 2x more at ~250
    topics a bundle: docs/benchmarks.md#replay), and the same function as `roll_up`'s."""
    values = column.tolist()
    return [exact_sum(values[lo:hi]) for lo, hi in pairwise(bounds)]


def _namespace_of(full_name: str) -> str | None:
    """`tenant/ns` of a topic name; the stream's names are full ones, split without a parse
    (the hot path: every topic of every window), anything else parsed."""
    if full_name.startswith(_DOMAINS):
        parts = full_name.split("/", 4)
        if len(parts) == 5 and all(parts[2:]):
            return f"{parts[2]}/{parts[3]}"
    try:
        return parse_topic(full_name).namespace_name
    except InvalidTopicName:
        return None
