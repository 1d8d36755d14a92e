"""What the balancer would do now: the controller's own rules over a few stats samples.

`pulsar-balancer plan` polls broker-stats a few times, turns the samples into one window of
bundle loads (`window_loads`: rates averaged over the samples a topic appears in, sizes and
counts from its newest sample, as the stream's windows do) and runs the same detection the
controller runs on each closed window (`balancer.core.detect.detect`, with the config's limits,
per-namespace overrides, fill factor, split algorithm and offload thresholds), then the
controller's allow/deny list.

Hit count and cooldown need a history a one-shot plan does not have. The plan takes its
window as the one that reaches the hit count, with no cooldown running: it shows what `run`
would do once the load seen persists for `hit_count_threshold` consecutive windows. The
per-cycle cap and the namespace's bundle budget apply as in `run`.

Purely computational, with no side effects: the samples and the allow-list are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from balancer.core.bundles import BundleRange
from balancer.core.decisions import OffloadDecision, Skipped, SplitDecision, SplitReason
from balancer.core.detect import DetectionSettings, DetectorState, detect, over_threshold
from balancer.core.events import TopicStatsEvent
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.partitions import LoneHotTopic, lone_hot_topics
from balancer.core.thresholds import Thresholds

# The skip reason of a decision the controller would refuse (its allow/deny list).
DENIED = "denied"
DENIED_DETAIL = "namespace outside the allow-list or deny-listed"


@dataclass(frozen=True, slots=True)
class TopicSample:
    """One topic's stats as one broker reported it, with the bundle the broker put it in."""

    namespace: str
    bundle: BundleRange
    event: TopicStatsEvent


def window_loads(samples: Iterable[TopicSample]) -> list[BundleLoad]:
    """Bundle loads (with their topics) of the samples taken as one window.

    Rates are averaged over the samples in which a topic appears; sizes, counts and the
    bundle come from its newest sample. The window ends at the newest sample's time.
    """
    by_topic: dict[tuple[str, str], list[TopicSample]] = {}
    for s in samples:
        by_topic.setdefault((s.event.cluster, s.event.topic), []).append(s)
    grouped: dict[tuple[str, str, BundleRange], list[TopicLoad]] = {}
    window_end_ms = 0
    for (cluster, topic), items in by_topic.items():
        newest = max(items, key=lambda s: s.event.timestamp_ms)
        window_end_ms = max(window_end_ms, newest.event.timestamp_ms)
        n = len(items)
        e = newest.event
        load = TopicLoad(
            topic=topic,
            position=hash_position(topic),
            msg_rate_in=sum(s.event.msgRateIn for s in items) / n,
            msg_rate_out=sum(s.event.msgRateOut for s in items) / n,
            msg_throughput_in=sum(s.event.msgThroughputIn for s in items) / n,
            msg_throughput_out=sum(s.event.msgThroughputOut for s in items) / n,
            producer_count=e.producerCount,
            consumer_count=e.consumerCount,
            storage_size=e.storageSize,
            backlog_size=e.backlogSize,
            offloaded_storage_size=e.offloadedStorageSize,
        )
        grouped.setdefault((cluster, newest.namespace, newest.bundle), []).append(load)
    return [
        roll_up(
            cluster=cluster,
            namespace=namespace,
            bundle=bundle,
            window_end_ms=window_end_ms,
            topics=tuple(sorted(topics, key=lambda t: (t.position, t.topic))),
        )
        for (cluster, namespace, bundle), topics in sorted(grouped.items())
    ]


def large_topics(
    bundles: Sequence[BundleLoad], thresholds: Thresholds
) -> list[tuple[str, TopicLoad]]:
    """Topics at least as large as the smallest offload threshold (what the stream reports)."""
    minimum = thresholds.min_offload_threshold_bytes()
    if minimum is None:
        return []
    return [
        (b.cluster, t)
        for b in bundles
        for t in b.topics
        if t.storage_size - t.offloaded_storage_size > minimum
    ]


@dataclass(frozen=True, slots=True)
class PlannedSkip:
    """An over-limit bundle, or a decision, that gets no action, and why."""

    cluster: str
    namespace: str
    target: str  # bundle range, or topic for an offload
    reason: str  # a SkipReason value, or DENIED
    split_reasons: tuple[SplitReason, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "namespace": self.namespace,
            "target": self.target,
            "reason": self.reason,
            "split_reasons": [r.value for r in self.split_reasons],
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    window_end_ms: int
    hit_count_threshold: int  # windows `run` waits for; the plan assumes they are reached
    bundles: int  # bundles with load in the samples
    over_limit: int  # of which over a limit
    splits: tuple[SplitDecision, ...]
    offloads: tuple[OffloadDecision, ...]
    skipped: tuple[PlannedSkip, ...]
    lone_hot_topics: tuple[LoneHotTopic, ...]

    @property
    def has_proposals(self) -> bool:
        return bool(self.splits or self.offloads)


def make_plan(
    bundles: Sequence[BundleLoad],
    *,
    thresholds: Thresholds,
    detection: DetectionSettings,
    allows: Callable[[str], bool],
    now_ms: int,
    bundle_counts: Mapping[tuple[str, str], int] | None = None,
) -> Plan:
    """The controller's decisions for `bundles` as one window that reaches the hit count.

    `allows(namespace)` is the controller's allow/deny list; a decision it refuses is a
    skip with reason DENIED. `bundle_counts` as for `detect` (the namespaces' layouts).
    """
    window_end_ms = max((b.window_end_ms for b in bundles), default=0)
    result = detect(
        bundles=bundles,
        large_topics=large_topics(bundles, thresholds),
        window_end_ms=window_end_ms,
        now_ms=now_ms,
        thresholds=thresholds,
        settings=replace(detection, hit_count_threshold=1),
        state=DetectorState(),
        bundle_counts=bundle_counts,
    )
    skipped = [_from_skipped(s) for s in result.skipped]
    splits: list[SplitDecision] = []
    for split in result.splits:
        if allows(split.namespace):
            splits.append(split)
        else:
            skipped.append(
                PlannedSkip(
                    split.cluster,
                    split.namespace,
                    str(split.bundle),
                    DENIED,
                    split.reasons,
                    DENIED_DETAIL,
                )
            )
    offloads: list[OffloadDecision] = []
    for offload in result.offloads:
        if allows(offload.namespace):
            offloads.append(offload)
        else:
            skipped.append(
                PlannedSkip(
                    offload.cluster, offload.namespace, offload.topic, DENIED, (), DENIED_DETAIL
                )
            )
    over = [b for b in bundles if over_threshold(b, thresholds.policy_for(b.namespace).limits)]
    # A topic alone over a limit makes its bundle over it too; all bundles give partitions.
    lone = lone_hot_topics(
        bundles,
        limits_for=lambda ns: thresholds.policy_for(ns).limits,
        fill_factor=detection.fill_factor,
    )
    return Plan(
        window_end_ms=window_end_ms,
        hit_count_threshold=detection.hit_count_threshold,
        bundles=len(bundles),
        over_limit=len(over),
        splits=tuple(splits),
        offloads=tuple(offloads),
        skipped=tuple(skipped),
        lone_hot_topics=tuple(lone),
    )


def _from_skipped(s: Skipped) -> PlannedSkip:
    return PlannedSkip(s.cluster, s.namespace, str(s.bundle), s.reason.value, s.split_reasons)
