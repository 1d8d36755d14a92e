"""The simulated layout a replayed policy changes: per cluster its brokers, each namespace's
bundle boundaries and each bundle's owner, started from a recorded round and changed only by
the policy's own splits and moves (and by `follow`, for what the recording forces on every
policy alike: namespaces created, brokers gone).

Loads on the layout:
- bundle loads: the window's topic loads rolled up onto the layout's bundles by hash position
  (`balancer.core.load.roll_up`; positions are Pulsar's CRC32 of the full topic name);
- broker loads: the round's recorded load report, corrected for the topics whose owner in
  this layout differs from their owner in the recorded layout of that round, by the rule of
  `balancer.core.replay.correction` (the one `ours`' move planner reads by too: bandwidth by
  throughput, cpu by msg rate at the recorded carrier's cost per msg/s). A layout equal to
  the recording's therefore sees exactly the recorded reports. Brokers without a report in
  the round have no limits to compare with: they are left out of the broker loads (their
  bundles still count in the bundle loads).

Purely computational, with no side effects.
"""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

from balancer.core.broker_load import (
    BrokerLoadReport,
    LoadWeights,
    Resource,
    ResourceUsage,
    load_ratio,
)
from balancer.core.bundles import BundleRange, InvalidBundle, NamespaceBundles
from balancer.core.hashing import FULL_LOWER, FULL_UPPER
from balancer.core.limits import BundleLimits, max_ratio
from balancer.core.load import BundleLoad
from balancer.core.replay.correction import (
    KBIT_PER_BYTE,
    LoadDelta,
    corrected_resources,
    cpu_costs,
    move_load,
    newest_reports,
)
from balancer.core.replay.recording import RoundContext
from balancer.core.replay.result import WindowSample
from balancer.core.replay.window import ReplayWindow

_NO_DELTA = LoadDelta()  # read only: a broker whose load no layout change touched
# The recorded layouts of the last rounds (`ReplayLayout.recorded`): every policy follows
# each round and reads the window's round, so one is built per round, not per policy.
_RECORDED_KEPT = 32  # two rounds of each of 16 clusters (more: rebuilt, not wrong)
_recorded: dict[int, tuple[RoundContext, ReplayLayout]] = {}


def split_key(key: str) -> tuple[str, BundleRange]:
    """`tenant/ns/0x.._0x..` -> (`tenant/ns`, range); InvalidBundle when it is none."""
    namespace, sep, text = key.rpartition("/")
    if not sep or namespace.count("/") != 1:
        raise InvalidBundle(f"invalid bundle key {key!r} (expected tenant/ns/0x.._0x..)")
    return namespace, BundleRange.parse(text)


@dataclass
class ClusterLayout:
    """One cluster's brokers, bundles and owners (a bundle no broker owns has no owner)."""

    cluster: str
    brokers: tuple[str, ...]  # ids `host:port`, sorted
    namespaces: dict[str, NamespaceBundles]
    owners: dict[str, str]  # bundle key `tenant/ns/0x.._0x..` -> broker


@dataclass(frozen=True, slots=True)
class BrokerView:
    """A broker's load as a policy's layout sees it in one window (the recorded report,
    corrected for the bundles that moved away from or onto it)."""

    cluster: str
    broker: str
    load_ratio: float  # Pulsar's weighted max of resource usages; 1.0 is full
    msg_rate: float  # msg/s in + out
    throughput_in: float  # bytes/s
    throughput_out: float  # bytes/s
    resources: Mapping[Resource, ResourceUsage]

    @property
    def throughput_bytes(self) -> float:
        return self.throughput_in + self.throughput_out


@dataclass
class ReplayLayout:
    """Every cluster's layout as one policy has it."""

    clusters: dict[str, ClusterLayout] = field(default_factory=dict)
    # Bundle keys in the reports that are no bundle, and bundles reported by two brokers or
    # overlapping another (a split or a transfer caught half-way): counted, then skipped.
    invalid_bundles: int = 0
    conflicting_bundles: int = 0

    # ---- building ----

    @classmethod
    def from_contexts(cls, contexts: Iterable[RoundContext]) -> ReplayLayout:
        """The recorded layout: per cluster, the newest of the given rounds."""
        newest: dict[str, RoundContext] = {}
        for ctx in contexts:
            if ctx.cluster not in newest or ctx.round_ms >= newest[ctx.cluster].round_ms:
                newest[ctx.cluster] = ctx
        layout = cls()
        for cluster in sorted(newest):
            layout.clusters[cluster] = layout._cluster_from(newest[cluster])
        return layout

    @classmethod
    def recorded(cls, ctx: RoundContext) -> ReplayLayout:
        """`from_contexts([ctx])`, built once per round context and shared: read only (copy
        it to change it)."""
        hit = _recorded.get(id(ctx))
        if hit is not None and hit[0] is ctx:  # the context is held: its id is not reused
            return hit[1]
        layout = cls.from_contexts([ctx])
        _recorded[id(ctx)] = (ctx, layout)
        while len(_recorded) > _RECORDED_KEPT:
            del _recorded[next(iter(_recorded))]
        return layout

    def _cluster_from(self, ctx: RoundContext) -> ClusterLayout:
        # The newest report of each broker; a bundle reported twice keeps the newest report's
        # broker (ties: the smaller id), a bundle overlapping one already taken is skipped
        # (the finer one wins: the children of a split whose parent is still reported).
        reports = newest_reports(ctx.reports)
        claims: dict[str, list[tuple[BundleRange, int, str]]] = {}
        for report in reports.values():
            for key in report.bundles:
                try:
                    namespace, bundle = split_key(key)
                except InvalidBundle:
                    self.invalid_bundles += 1
                    continue
                claims.setdefault(namespace, []).append(
                    (bundle, -report.timestamp_ms, report.broker)
                )
        namespaces: dict[str, NamespaceBundles] = {}
        owners: dict[str, str] = {}
        for namespace in sorted(claims):
            taken: list[BundleRange] = []
            end = FULL_LOWER
            for bundle, _, broker in sorted(claims[namespace]):
                if taken and bundle.lower < end:
                    self.conflicting_bundles += 1
                    continue
                taken.append(bundle)
                owners[bundle.key(namespace)] = broker
                end = bundle.upper
            namespaces[namespace] = _cover(namespace, taken)
        return ClusterLayout(ctx.cluster, tuple(sorted(reports)), namespaces, owners)

    def copy(self) -> ReplayLayout:
        """An independent copy (each policy changes its own)."""
        return copy.deepcopy(self)

    def follow(self, ctx: RoundContext) -> int:
        """What the recording forces on every policy: the cluster's brokers become the
        round's; namespaces this layout lacks are taken as recorded; a bundle whose owner
        is not in the round, or that no broker owns, takes the recorded owner of its lower
        position (Pulsar reassigns an orphaned bundle at its next lookup), if the recording
        names one. Returns the bundles given an owner."""
        recorded = ReplayLayout.recorded(ctx)
        rec = recorded.clusters[ctx.cluster]
        self.invalid_bundles += recorded.invalid_bundles
        self.conflicting_bundles += recorded.conflicting_bundles
        mine = self.clusters.setdefault(ctx.cluster, ClusterLayout(ctx.cluster, (), {}, {}))
        mine.brokers = rec.brokers
        for namespace, bundles in rec.namespaces.items():
            if namespace not in mine.namespaces:
                mine.namespaces[namespace] = bundles
                for b in bundles.bundles:
                    owner = rec.owners.get(b.key(namespace))
                    if owner is not None:
                        mine.owners[b.key(namespace)] = owner
        present = set(rec.brokers)
        rehomed = 0
        for namespace, bundles in mine.namespaces.items():
            for b in bundles.bundles:
                key = b.key(namespace)
                if mine.owners.get(key) in present:
                    continue
                owner = recorded.owner_of(ctx.cluster, namespace, b.lower)
                if owner is None:
                    # Nobody claims it in the recording either (a report missed this round):
                    # it stays where it was until the recording shows its new owner.
                    continue
                mine.owners[key] = owner
                rehomed += 1
        return rehomed

    # ---- reading ----

    def brokers(self, cluster: str) -> tuple[str, ...]:
        c = self.clusters.get(cluster)
        return c.brokers if c else ()

    def bundle_of(self, cluster: str, namespace: str, position: int) -> BundleRange | None:
        c = self.clusters.get(cluster)
        layout = c.namespaces.get(namespace) if c else None
        return layout.find(position) if layout else None

    def owner_of(self, cluster: str, namespace: str, position: int) -> str | None:
        """The broker owning the bundle that holds `position` (None: no such bundle/owner)."""
        bundle = self.bundle_of(cluster, namespace, position)
        if bundle is None:
            return None
        return self.clusters[cluster].owners.get(bundle.key(namespace))

    def owner(self, cluster: str, bundle_key: str) -> str | None:
        c = self.clusters.get(cluster)
        return c.owners.get(bundle_key) if c else None

    def has_bundle(self, cluster: str, bundle_key: str) -> bool:
        namespace, bundle = split_key(bundle_key)
        c = self.clusters.get(cluster)
        layout = c.namespaces.get(namespace) if c else None
        return layout is not None and layout.has(bundle)

    def bundles_of(self, cluster: str, broker: str) -> list[str]:
        """The bundle keys `broker` owns, sorted."""
        c = self.clusters.get(cluster)
        return sorted(k for k, b in c.owners.items() if b == broker) if c else []

    def num_bundles(self) -> int:
        return sum(ns.num_bundles for c in self.clusters.values() for ns in c.namespaces.values())

    # ---- changing ----

    def apply_split(
        self, cluster: str, bundle_key: str, boundaries: Sequence[int]
    ) -> tuple[BundleRange, ...]:
        """Split a bundle at `boundaries`; the children stay on the parent's owner (Pulsar's
        `NamespaceService.splitAndOwnBundle` owns them where the parent was; a policy that
        unloads them afterwards moves them itself). InvalidBundle when it cannot be."""
        namespace, bundle = split_key(bundle_key)
        c = self.clusters[cluster]
        layout = c.namespaces.get(namespace)
        if layout is None:
            raise InvalidBundle(f"{cluster}: no namespace {namespace}")
        new, children = layout.split(bundle, boundaries)
        c.namespaces[namespace] = new
        owner = c.owners.pop(bundle_key, None)
        if owner is not None:
            for child in children:
                c.owners[child.key(namespace)] = owner
        return tuple(children)

    def apply_move(self, cluster: str, bundle_key: str, destination: str) -> str | None:
        """Give a bundle to `destination`; returns its previous owner."""
        if not self.has_bundle(cluster, bundle_key):
            raise InvalidBundle(f"{cluster}: no bundle {bundle_key}")
        c = self.clusters[cluster]
        if destination not in c.brokers:
            raise InvalidBundle(f"{cluster}: no broker {destination}")
        source = c.owners.get(bundle_key)
        c.owners[bundle_key] = destination
        return source

    # ---- loads ----

    def bundle_loads(self, window: ReplayWindow) -> list[BundleLoad]:
        """The window's topics rolled up onto this layout's bundles (bundles with topics)."""
        placed: list[tuple[str, str, NamespaceBundles]] = []
        for cluster, namespace in window.namespaces:
            c = self.clusters.get(cluster)
            layout = c.namespaces.get(namespace) if c else None
            if layout is not None:  # else counted by `unplaced_topics`
                placed.append((cluster, namespace, layout))
        window.roll_up_all(placed)
        loads: list[BundleLoad] = []
        for cluster, namespace, layout in placed:
            loads += [b for b in window.namespace_loads(cluster, namespace, layout) if b]
        return loads

    def unplaced_topics(self, window: ReplayWindow) -> int:
        """Topics of the window in a namespace this layout does not know."""
        unplaced = 0
        for (cluster, namespace), nsw in window.namespaces.items():
            c = self.clusters.get(cluster)
            if c is None or namespace not in c.namespaces:
                unplaced += len(nsw)
        return unplaced

    def broker_loads(
        self, window: ReplayWindow, weights: LoadWeights | None = None
    ) -> dict[tuple[str, str], BrokerView]:
        """(cluster, broker) -> its load on this layout (see the module doc)."""
        weights = weights or LoadWeights()
        out: dict[tuple[str, str], BrokerView] = {}
        for cluster in sorted(window.contexts):
            ctx = window.contexts[cluster]
            reports = newest_reports(ctx.reports)
            deltas = self._deltas(window, ctx, reports)
            for broker, report in sorted(reports.items()):
                d = deltas.get(broker, _NO_DELTA)
                resources = corrected_resources(report.resources, d)
                out[(cluster, broker)] = BrokerView(
                    cluster=cluster,
                    broker=broker,
                    load_ratio=load_ratio(resources, weights),
                    msg_rate=max(0.0, report.msg_rate_in + report.msg_rate_out + d.msg_rate),
                    throughput_in=max(0.0, report.msg_throughput_in + d.throughput_in),
                    throughput_out=max(0.0, report.msg_throughput_out + d.throughput_out),
                    resources=resources,
                )
        return out

    def _deltas(
        self, window: ReplayWindow, ctx: RoundContext, reports: Mapping[str, BrokerLoadReport]
    ) -> dict[str, LoadDelta]:
        cluster = ctx.cluster
        mine = self.clusters.get(cluster)
        if mine is None:
            return {}
        rec = ReplayLayout.recorded(ctx).clusters[cluster]
        cpu_cost = cpu_costs(reports)
        deltas: dict[str, LoadDelta] = {}
        for c, namespace in window.namespaces:
            layout = mine.namespaces.get(namespace)
            if c != cluster or layout is None:
                continue
            rec_layout = rec.namespaces.get(namespace)
            keys = bundle_keys(namespace, layout.boundaries)
            was_keys = (
                _recorded_keys(namespace, layout.boundaries, rec_layout.boundaries)
                if rec_layout is not None
                else (None,) * len(keys)
            )
            for bundle, key, was_key in zip(layout.bundles, keys, was_keys, strict=True):
                owner = mine.owners.get(key)
                if was_key is not None:
                    # Inside one recorded bundle (the same, or a child of its split): one
                    # recorded owner for all its topics.
                    was = rec.owners.get(was_key)
                    if was == owner:
                        continue  # nothing to correct
                    load = window.bundle_load(cluster, namespace, bundle)
                    if load is not None and was is not None:
                        move_load(deltas, load, was, owner, cpu_cost)
                        continue
                # Topic by topic (the bundle spans recorded bundles, or its recorded one has
                # no owner): each topic's recorded owner is that of the recorded bundle
                # holding it (`owner_of`, looked up once per recorded bundle), else the
                # broker that reported it.
                owner_at: dict[int, str | None] = {}
                nsw = window.namespaces[(c, namespace)]
                for topic in nsw.in_bundle(bundle):
                    was = None
                    if rec_layout is not None:
                        i = _index_of(rec_layout, topic.load.position)
                        if i not in owner_at:
                            lower, upper = rec_layout.boundaries[i : i + 2]
                            owner_at[i] = rec.owners.get(BundleRange(lower, upper).key(namespace))
                        was = owner_at[i]
                    was = was if was is not None else topic.broker
                    if was != owner:
                        move_load(deltas, topic.load, was, owner, cpu_cost)
        return deltas

    def sample(
        self,
        window: ReplayWindow,
        limits: BundleLimits | None = None,
        weights: LoadWeights | None = None,
    ) -> WindowSample:
        """The window as this layout carries it: broker load ratios (`cluster/broker`) and
        the bundles at or over their tightest limit (`cluster/tenant/ns/0x.._0x..`)."""
        limits = limits or BundleLimits()
        brokers = self.broker_loads(window, weights)
        over: dict[str, float] = {}
        for load in self.bundle_loads(window):
            ratio = max_ratio(load, limits)
            if ratio >= 1.0:
                over[f"{load.cluster}/{load.bundle.key(load.namespace)}"] = ratio
        return WindowSample(
            window_end_ms=window.window_end_ms,
            broker_load={f"{c}/{b}": v.load_ratio for (c, b), v in brokers.items()},
            bundles_over=over,
            bundles=self.num_bundles(),
        )


@lru_cache(maxsize=1 << 16)
def bundle_keys(namespace: str, boundaries: tuple[int, ...]) -> tuple[str, ...]:
    """The keys of the bundles between `boundaries` (`BundleRange.key`), made once per
    layout: a replay asks them of every bundle of every policy in every window."""
    return tuple(BundleRange(lo, hi).key(namespace) for lo, hi in pairwise(boundaries))


@lru_cache(maxsize=1 << 16)
def _recorded_keys(
    namespace: str, boundaries: tuple[int, ...], recorded: tuple[int, ...]
) -> tuple[str | None, ...]:
    """For each bundle between `boundaries`, the key of the recorded bundle (between
    `recorded`) that holds it whole, None when it spans recorded bundles; made once per pair
    of layouts (mostly the same one: each bundle its own recorded bundle)."""
    if boundaries == recorded:
        return bundle_keys(namespace, boundaries)
    rec_layout = NamespaceBundles(namespace, recorded)
    out: list[str | None] = []
    for bundle in NamespaceBundles(namespace, boundaries).bundles:
        was = rec_layout.find(bundle.lower)
        out.append(was.key(namespace) if bundle.upper <= was.upper else None)
    return tuple(out)


def _index_of(layout: NamespaceBundles, position: int) -> int:
    """The index of the bundle holding `position`, as `NamespaceBundles.find` finds it (the
    greatest boundary <= position; 0xffffffff in the last bundle)."""
    if not FULL_LOWER <= position <= FULL_UPPER:
        raise InvalidBundle(f"hash position {position} is outside the hash range")
    return min(bisect_right(layout.boundaries, position) - 1, layout.num_bundles - 1)


def _cover(namespace: str, taken: Sequence[BundleRange]) -> NamespaceBundles:
    """The boundaries of the owned bundles; a gap between them (bundles no broker owns, whose
    own boundaries no report shows) becomes one unowned bundle."""
    points = {FULL_LOWER, FULL_UPPER}
    for b in taken:
        points.add(b.lower)
        points.add(b.upper)
    return NamespaceBundles(namespace, tuple(sorted(points)))


__all__ = [
    "KBIT_PER_BYTE",
    "BrokerView",
    "ClusterLayout",
    "ReplayLayout",
    "split_key",
]
