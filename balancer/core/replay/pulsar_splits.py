"""Models of Pulsar's automatic bundle split with its default settings: which bundles its
load manager splits in one check, and where. For the replay's Pulsar policies
(`balancer.core.replay.pulsar_policies`) and `bench.reaction_time`.

Checked against apache/pulsar's source (classes named per rule):

- Modular load manager (`ModularLoadManagerImpl.checkNamespaceBundleSplit`, on the leader,
  each time it updates its load data; `BundleSplitterTask.findBundlesToSplit` decides):
  every bundle of every broker's report with >= 2 topics whose topics (> 1000
  `loadBalancerNamespaceBundleMaxTopics`) or sessions (> 1000, when > 0) from the report,
  or whose LONG-TERM msg rate (> 30000 in + out) or throughput (> 100 MiB/s in + out) is over
  its limit, while the namespace stays under 128 bundles (`loadBalancerNamespaceMaximumBundles`,
  counting the ones chosen in the same check). No hit count and no cap per check. The long-term
  rates are `TimeAverageMessageData` over up to 1000 samples (`NUM_LONG_SAMPLES`), one per
  load-data update: a running mean that starts again from the first sample for a new bundle
  (the split removes the parent's data). The split uses the broker's default algorithm
  (`defaultNamespaceBundleSplitAlgorithm` range_equally_divide), and the children are unloaded
  (`loadBalancerAutoUnloadSplitBundlesEnabled` true: `NamespaceService.splitAndOwnBundle`
  unloads each new bundle), so the leader places them anew.
- Extensible load manager (`DefaultNamespaceBundleSplitStrategyImpl.findBundlesToSplit`, run by
  `SplitScheduler` every `loadBalancerSplitIntervalMinutes` (1) on EACH broker for the bundles it
  owns): the same limits on the broker's current bundle stats (not long-term), a bundle split
  when over in MORE than 3 consecutive checks (`loadBalancerNamespaceBundleSplitConditionHitCount
  Threshold`), its count then starting again, at most 10 splits per check and broker
  (`loadBalancerMaxNumberOfBundlesToSplitPerCycle`), never a bundle with < 2 topics (no count
  either) nor past 128 bundles per namespace (count kept), and exactly one boundary per split
  (any other number is a failure: count kept). The children stay on the parent's owner.

The iteration order is a Java HashMap's in both; these models take the caller's order
(heaviest msg rate first, for the replay), which only matters when a cap is reached.

Purely computational, with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from balancer.core.limits import BundleLimits, Limit, LoadTotals, over_limits
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.split import SplitAlgorithm, SplitError, SplitOptions, compute_split
from balancer.core.thresholds import DEFAULT_MAX_BUNDLES

HIT_COUNT_THRESHOLD = 3  # loadBalancerNamespaceBundleSplitConditionHitCountThreshold
MAX_SPLITS_PER_CYCLE = 10  # loadBalancerMaxNumberOfBundlesToSplitPerCycle (per broker)
LONG_TERM_SAMPLES = 1000  # ModularLoadManagerImpl.NUM_LONG_SAMPLES
DEFAULT_ALGORITHM = SplitAlgorithm.RANGE_EQUALLY_DIVIDE  # defaultNamespaceBundleSplitAlgorithm

# A bundle's boundaries by the split algorithm (empty: no boundary found).
BoundaryFn = Callable[[BundleLoad], Sequence[int]]


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """A bundle the load manager splits in this check, with its boundaries."""

    load: BundleLoad
    boundaries: tuple[int, ...]
    reason: Limit  # the first limit exceeded, in Pulsar's order Topics > Sessions > ...

    @property
    def key(self) -> str:
        return self.load.bundle.key(self.load.namespace)


def pulsar_boundaries(
    algorithm: SplitAlgorithm,
    options: SplitOptions | None = None,
    topics_of: Callable[[BundleLoad], Sequence[TopicLoad]] | None = None,
) -> BoundaryFn:
    """The boundaries Pulsar's algorithm gives a bundle (needs the bundle's topics for the
    flow- and count-based ones: `topics_of(load)`, by default the load's own `topics`); none
    when the broker would reject them (`SplitError`)."""
    opts = options or SplitOptions()

    def boundaries(load: BundleLoad) -> Sequence[int]:
        topics = topics_of(load) if topics_of is not None else load.topics
        try:
            return compute_split(algorithm, load.bundle, topics, opts).boundaries
        except SplitError:
            return ()

    return boundaries


@dataclass
class ExtensibleSplitStrategy:
    """`DefaultNamespaceBundleSplitStrategyImpl` of one broker (its `splitConditionHitCounts`
    live as long as the broker's scheduler; see the module doc)."""

    limits: BundleLimits = field(default_factory=BundleLimits)
    hit_count_threshold: int = HIT_COUNT_THRESHOLD
    max_splits_per_cycle: int = MAX_SPLITS_PER_CYCLE
    max_bundles: int = DEFAULT_MAX_BUNDLES
    hits: dict[str, int] = field(default_factory=dict)  # bundle key -> consecutive checks over

    def cycle(
        self,
        loads: Sequence[BundleLoad],
        bundle_counts: Mapping[str, int],
        boundaries: BoundaryFn,
    ) -> list[SplitChoice]:
        """One check over the bundles the broker owns (`loads`, in the order to visit them);
        `bundle_counts`: namespace -> its bundles now."""
        present = {load.bundle.key(load.namespace) for load in loads}
        # splitConditionHitCounts.keySet().retainAll(bundleStatsMap.keySet())
        self.hits = {k: v for k, v in self.hits.items() if k in present}
        decided: list[SplitChoice] = []
        in_namespace: dict[str, int] = {}
        for load in loads:
            if load.topic_count < 2 or not load.bundle.splittable:
                continue  # "The topic count is less than 2" / canSplitBundle
            key = load.bundle.key(load.namespace)
            reasons = over_limits(load, self.limits)
            if reasons:
                self.hits[key] = self.hits.get(key, 0) + 1
            else:
                self.hits.pop(key, None)
            if self.hits.get(key, 0) <= self.hit_count_threshold:
                continue
            count = bundle_counts.get(load.namespace, 0) + in_namespace.get(load.namespace, 0)
            if count >= self.max_bundles:
                continue
            found = tuple(boundaries(load))
            if len(found) != 1:
                continue  # "The size of split boundaries is not 1": a failure, count kept
            decided.append(SplitChoice(load, found, reasons[0]))
            in_namespace[load.namespace] = in_namespace.get(load.namespace, 0) + 1
            self.hits.pop(key, None)
            if len(decided) == self.max_splits_per_cycle:
                break
        return decided


@dataclass
class _LongTerm:
    """`TimeAverageMessageData`: a running mean over up to `max_samples` samples."""

    samples: int = 0
    msg_rate: float = 0.0
    throughput_bytes: float = 0.0

    def update(self, msg_rate: float, throughput_bytes: float, max_samples: int) -> None:
        self.samples = min(self.samples + 1, max_samples)
        n = self.samples
        self.msg_rate = ((n - 1) * self.msg_rate + msg_rate) / n
        self.throughput_bytes = ((n - 1) * self.throughput_bytes + throughput_bytes) / n


@dataclass
class ModularSplitStrategy:
    """`BundleSplitterTask` with `ModularLoadManagerImpl`'s bundle data, on the leader of one
    cluster (see the module doc)."""

    limits: BundleLimits = field(default_factory=BundleLimits)
    max_bundles: int = DEFAULT_MAX_BUNDLES
    long_term_samples: int = LONG_TERM_SAMPLES
    long_term: dict[str, _LongTerm] = field(default_factory=dict)  # bundle key -> its data

    def cycle(
        self,
        loads: Sequence[BundleLoad],
        bundle_counts: Mapping[str, int],
        boundaries: BoundaryFn,
    ) -> list[SplitChoice]:
        """One load-data update and split check over every bundle of the cluster's reports."""
        present = {load.bundle.key(load.namespace) for load in loads}
        # A bundle gone from every report is not sampled again; its data is dropped here so
        # memory follows the layout (Pulsar keeps it in the metadata store, unused).
        self.long_term = {k: v for k, v in self.long_term.items() if k in present}
        for load in loads:  # updateBundleData, before checkNamespaceBundleSplit
            data = self.long_term.setdefault(load.bundle.key(load.namespace), _LongTerm())
            data.update(load.msg_rate, load.throughput_bytes, self.long_term_samples)
        decided: list[SplitChoice] = []
        in_namespace: dict[str, int] = {}
        for load in loads:
            if load.topic_count < 2:
                continue
            key = load.bundle.key(load.namespace)
            data = self.long_term[key]
            reasons = over_limits(
                LoadTotals(
                    topic_count=load.topic_count,
                    session_count=load.session_count,
                    msg_rate=data.msg_rate,
                    throughput_bytes=data.throughput_bytes,
                ),
                self.limits,
            )
            if not reasons:
                continue
            count = bundle_counts.get(load.namespace, 0) + in_namespace.get(load.namespace, 0)
            if count >= self.max_bundles:
                continue  # "has too many bundles"
            in_namespace[load.namespace] = in_namespace.get(load.namespace, 0) + 1
            if not load.bundle.splittable:
                continue  # checkNamespaceBundleSplit: canSplitBundle
            del self.long_term[key]  # "Make sure the same bundle is not selected again"
            found = tuple(boundaries(load))
            if not found:
                continue  # the admin split fails (its data is gone all the same)
            decided.append(SplitChoice(load, found, reasons[0]))
        return decided
