"""Overload detection: which bundles to split and which topics to offload, from one window.

Rules (Pulsar's, plus the gates this project adds):
- A bundle is over threshold when any of its four limits is exceeded: topics, sessions
  (producers + consumers), msgRate (in + out), bandwidth (in + out, MiB * 1048576); a
  limit <= 0 is disabled (the rule is `balancer.core.limits`'s). Reasons come in Pulsar's
  priority order: Topics > Sessions > MsgRate > Bandwidth.
- Completeness gate: a window whose completeness is under `min_completeness` is not evidence
  either way; it resets the bundle's hit count (decisions need N consecutive COMPLETE windows).
- Hysteresis: a split is decided on the `hit_count_threshold`-th consecutive complete window
  over threshold. A window is identified by its `window_end_ms`: a window seen again (replay)
  or an older one never counts twice. A window under threshold resets the count, and so does
  a window in which the bundle does not appear. (Pulsar compares its hit counter with `>`,
  so its threshold 3 acts on the 4th check; here N means "act on the Nth window", as the
  project's issue states.)
- Never split a bundle with < 2 topics or with `upper - lower <= 1`; respect the namespace's
  maximum bundle count (counting the children a split adds: the algorithm gets
  `max_children = remaining budget + 1`), a per-cycle cap on splits (the most overloaded
  first; the rest stay ready for the next window) and a cooldown per namespace after a split.
- Offload: a topic (each partition on its own) whose bytes still in BookKeeper
  (`storageSize - offloadedStorageSize`) exceed its namespace's threshold. broker-stats has
  no `offloadedStorageSize` and its `storageSize` counts offloaded ledgers: the caller fills
  in the offloaded bytes (from internalStats) of the topics over their threshold.

State that persists across windows (hit counts, cooldowns) is a `DetectorState` value passed
in and returned; `detect` is purely computational, with no side effects. Time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from balancer.core.bundles import BundleRange
from balancer.core.decisions import (
    REASON_FOR_LIMIT,
    REASON_PRIORITY,
    OffloadDecision,
    Skipped,
    SkipReason,
    SplitDecision,
    SplitInputs,
    SplitReason,
    offload_decision_id,
    split_decision_id,
)
from balancer.core.limits import BundleLimits, over_limits
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.split import SplitError, SplitOptions, compute_split
from balancer.core.thresholds import NamespacePolicy, Thresholds
from balancer.core.topics import InvalidTopicName, parse_topic

BundleKey = tuple[str, str, BundleRange]  # cluster, namespace, bundle
NamespaceKey = tuple[str, str]  # cluster, namespace


@dataclass(frozen=True, slots=True)
class DetectionSettings:
    hit_count_threshold: int = 3  # consecutive complete windows over threshold before a split
    min_completeness: float = 0.9  # share of a bundle's known topics that must report
    max_splits_per_cycle: int = 10  # Pulsar's loadBalancerMaxNumberOfBundlesToSplitPerCycle
    cooldown_ms: int = 60_000  # per namespace after a split (Pulsar: split interval 1 min)
    difference_threshold_pct: float = 10.0  # flow_or_qps_equally_divide's margin
    fill_factor: float = 0.8  # balanced_flow_divide's target share of a limit per child
    # Bundles at least this share of a limit bring their per-topic rows from the executors
    # (a split needs them; those a little under a limit too, so a crossing is seen whole).
    topic_rows_min_load_ratio: float = 0.9


@dataclass(frozen=True, slots=True)
class BundleHits:
    count: int  # consecutive complete windows over threshold
    last_window_end_ms: int  # the last window counted (or that reset the count)


@dataclass(frozen=True, slots=True)
class DetectorState:
    """What detection remembers between windows. Treat as immutable: `detect` returns a new one."""

    hits: Mapping[BundleKey, BundleHits] = field(default_factory=dict)
    cooldown_until_ms: Mapping[NamespaceKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Detection:
    splits: tuple[SplitDecision, ...]
    offloads: tuple[OffloadDecision, ...]
    skipped: tuple[Skipped, ...]
    state: DetectorState


def over_threshold(bundle: BundleLoad, limits: BundleLimits) -> tuple[SplitReason, ...]:
    """The limits a bundle exceeds as split reasons, in Pulsar's priority order (empty: under)."""
    return tuple(REASON_FOR_LIMIT[limit] for limit in over_limits(bundle, limits))


def windows_to_split(state: DetectorState, key: BundleKey, settings: DetectionSettings) -> int:
    """How many more consecutive complete windows over threshold the bundle needs before a
    split is decided (0: decided in its last window, or ready for the next)."""
    hits = state.hits.get(key)
    return max(0, settings.hit_count_threshold - (hits.count if hits is not None else 0))


@dataclass(frozen=True, slots=True)
class _Candidate:
    load: BundleLoad
    policy: NamespacePolicy
    reasons: tuple[SplitReason, ...]
    hit_count: int

    @property
    def key(self) -> BundleKey:
        return (self.load.cluster, self.load.namespace, self.load.bundle)

    def sort_key(self) -> tuple[int, float, float, str, str, int]:
        # Most severe first: reason priority, then the heaviest load; ties are deterministic.
        return (
            REASON_PRIORITY.index(self.reasons[0]),
            -self.load.msg_rate,
            -self.load.throughput_bytes,
            self.load.cluster,
            self.load.namespace,
            self.load.bundle.lower,
        )


def _count_hits(
    bundles: Sequence[BundleLoad],
    *,
    window_end_ms: int,
    thresholds: Thresholds,
    settings: DetectionSettings,
    state: DetectorState,
) -> tuple[dict[BundleKey, BundleHits], list[_Candidate], list[Skipped]]:
    hits: dict[BundleKey, BundleHits] = {}
    ready: list[_Candidate] = []
    skipped: list[Skipped] = []
    for load in bundles:
        key: BundleKey = (load.cluster, load.namespace, load.bundle)
        if key in hits:
            continue  # the same bundle twice in one report: count it once
        previous = state.hits.get(key)
        if previous is not None and window_end_ms <= previous.last_window_end_ms:
            hits[key] = previous  # a window already counted: it never counts twice
            continue
        policy = thresholds.policy_for(load.namespace)
        reasons = over_threshold(load, policy.limits)
        if not reasons:
            hits[key] = BundleHits(0, window_end_ms)
            continue
        if load.completeness < settings.min_completeness:
            hits[key] = BundleHits(0, window_end_ms)
            skipped.append(_skip(load, SkipReason.INCOMPLETE, reasons))
            continue
        count = (previous.count if previous is not None else 0) + 1
        hits[key] = BundleHits(count, window_end_ms)
        if count < settings.hit_count_threshold:
            skipped.append(_skip(load, SkipReason.HYSTERESIS, reasons))
            continue
        ready.append(_Candidate(load, policy, reasons, count))
    return hits, ready, skipped


def _skip(load: BundleLoad, reason: SkipReason, reasons: tuple[SplitReason, ...]) -> Skipped:
    return Skipped(load.cluster, load.namespace, load.bundle, reason, reasons)


def _bundle_counts(
    bundles: Sequence[BundleLoad], known: Mapping[NamespaceKey, int] | None
) -> dict[NamespaceKey, int]:
    seen: dict[NamespaceKey, set[BundleRange]] = {}
    for load in bundles:
        seen.setdefault((load.cluster, load.namespace), set()).add(load.bundle)
    # The report holds only bundles with load; a known layout count is better when given.
    counts = {ns: len(ranges) for ns, ranges in seen.items()}
    for ns, count in (known or {}).items():
        counts[ns] = max(count, counts.get(ns, 0))
    return counts


def _decide_split(
    candidate: _Candidate,
    *,
    bundles_in_namespace: int,
    window_end_ms: int,
    settings: DetectionSettings,
) -> SplitDecision | SkipReason:
    load, policy = candidate.load, candidate.policy
    if not policy.split_enabled:
        return SkipReason.SPLIT_DISABLED
    if load.topic_count < 2 or len(load.topics) < 2:
        return SkipReason.TOO_FEW_TOPICS
    if not load.bundle.splittable:
        return SkipReason.UNSPLITTABLE
    remaining = policy.max_bundles - bundles_in_namespace
    if remaining <= 0:
        return SkipReason.MAX_BUNDLES
    limits = policy.limits
    options = replace(
        SplitOptions.from_limits(limits),
        difference_threshold_pct=settings.difference_threshold_pct,
        fill_factor=settings.fill_factor,
        max_children=remaining + 1,
    )
    try:
        result = compute_split(policy.algorithm, load.bundle, load.topics, options)
    except SplitError:
        # A Pulsar algorithm whose boundaries Pulsar itself would reject: no split, not a crash.
        return SkipReason.ALGORITHM_ERROR
    boundaries = tuple(sorted(b for b in result.boundaries if load.bundle.strictly_inside(b)))
    if not boundaries:
        return SkipReason.NO_BOUNDARY
    if len(boundaries) > remaining:
        # An algorithm that ignores max_children (Pulsar's greedy flow_or_qps) overshoots.
        return SkipReason.MAX_BUNDLES
    return SplitDecision(
        decision_id=split_decision_id(
            cluster=load.cluster,
            namespace=load.namespace,
            bundle=load.bundle,
            window_end_ms=window_end_ms,
        ),
        cluster=load.cluster,
        namespace=load.namespace,
        bundle=load.bundle,
        algorithm=result.algorithm,
        boundaries=boundaries,
        children=tuple(result.children),
        reasons=candidate.reasons,
        window_end_ms=window_end_ms,
        inputs=SplitInputs(
            msg_rate=load.msg_rate,
            throughput_bytes=load.throughput_bytes,
            topic_count=load.topic_count,
            session_count=load.session_count,
            completeness=load.completeness,
            hit_count=candidate.hit_count,
            limits=limits,
            bundles_in_namespace=bundles_in_namespace,
            max_bundles=policy.max_bundles,
        ),
    )


def detect_offloads(
    large_topics: Sequence[tuple[str, TopicLoad]],
    *,
    window_end_ms: int,
    thresholds: Thresholds,
) -> tuple[OffloadDecision, ...]:
    """Offload decisions for topics whose bytes in BookKeeper exceed their namespace threshold."""
    decisions: dict[tuple[str, str], OffloadDecision] = {}
    for cluster, topic in large_topics:
        try:
            name = parse_topic(topic.topic)
        except InvalidTopicName:
            continue  # the stream validates names; a bad one here is skipped, never fatal
        threshold = thresholds.policy_for(name.namespace_name).offload_threshold_bytes
        if threshold is None:
            continue
        bookkeeper_bytes = topic.storage_size - topic.offloaded_storage_size
        if bookkeeper_bytes <= threshold or (cluster, name.full) in decisions:
            continue
        decisions[(cluster, name.full)] = OffloadDecision(
            decision_id=offload_decision_id(
                cluster=cluster, topic=name.full, window_end_ms=window_end_ms
            ),
            cluster=cluster,
            namespace=name.namespace_name,
            topic=name.full,
            storage_size_bytes=topic.storage_size,
            offloaded_size_bytes=topic.offloaded_storage_size,
            threshold_bytes=threshold,
            window_end_ms=window_end_ms,
        )
    return tuple(decisions.values())


def detect(
    *,
    bundles: Sequence[BundleLoad],
    large_topics: Sequence[tuple[str, TopicLoad]] = (),
    window_end_ms: int,
    now_ms: int,
    thresholds: Thresholds,
    settings: DetectionSettings,
    state: DetectorState,
    bundle_counts: Mapping[NamespaceKey, int] | None = None,
) -> Detection:
    """Split and offload decisions for one window, and the detector state after it.

    `bundle_counts` gives the current number of bundles per (cluster, namespace) when known
    (from the admin API); otherwise the bundles present in the report are counted.
    """
    hits, ready, skipped = _count_hits(
        bundles, window_end_ms=window_end_ms, thresholds=thresholds, settings=settings, state=state
    )
    counts = _bundle_counts(bundles, bundle_counts)
    cooldowns = {ns: until for ns, until in state.cooldown_until_ms.items() if until > now_ms}
    split_namespaces: set[NamespaceKey] = set()
    splits: list[SplitDecision] = []
    for candidate in sorted(ready, key=_Candidate.sort_key):
        load = candidate.load
        ns_key: NamespaceKey = (load.cluster, load.namespace)
        outcome: SplitDecision | SkipReason
        if ns_key in cooldowns:
            outcome = SkipReason.COOLDOWN
        elif len(splits) >= settings.max_splits_per_cycle:
            outcome = SkipReason.CYCLE_CAP
        else:
            outcome = _decide_split(
                candidate,
                bundles_in_namespace=counts.get(ns_key, 1),
                window_end_ms=window_end_ms,
                settings=settings,
            )
        if isinstance(outcome, SkipReason):
            skipped.append(_skip(load, outcome, candidate.reasons))
            continue
        splits.append(outcome)
        split_namespaces.add(ns_key)
        counts[ns_key] = counts.get(ns_key, 1) + len(outcome.boundaries)
        hits[candidate.key] = BundleHits(0, window_end_ms)
    for ns_key in split_namespaces:
        cooldowns[ns_key] = now_ms + settings.cooldown_ms
    offloads = detect_offloads(large_topics, window_end_ms=window_end_ms, thresholds=thresholds)
    return Detection(
        splits=tuple(splits),
        offloads=offloads,
        skipped=tuple(skipped),
        state=DetectorState(hits=hits, cooldown_until_ms=cooldowns),
    )
