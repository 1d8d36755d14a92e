"""Lone hot topics: a topic (a partition, or a non-partitioned topic) over a bundle limit alone.

No split helps such a bundle: a split never cuts a topic, so the child holding it stays over
the limit. The remedy is more partitions. Producers spread messages over a partitioned
topic's partitions (round-robin or by key hash), so each partition carries about
`total / partitions`; the recommended count is the smallest one that brings every partition
under the fill target (`limit x fill_factor`, the same target balanced_flow_divide aims its
children at) for message rate and bandwidth. Sessions and topic counts do not shrink with
more partitions (a producer or consumer attaches to every partition), so they are not used.
Pulsar can only add partitions, never remove them: the count is at least the current one.

Purely computational, with no side effects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from balancer.core.limits import BundleLimits, Limit, LoadTotals, is_over
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.topics import InvalidTopicName, parse_topic


def recommended_partitions(
    *,
    current_partitions: int,
    total_msg_rate: float,
    total_throughput_bytes: float,
    limits: BundleLimits,
    fill_factor: float,
) -> int:
    """The smallest partition count >= `current_partitions` (0: not partitioned) that puts
    `total / count` under `limit x fill_factor` for msgRate and bandwidth (limits <= 0 are
    disabled); at least 1.
    """
    if not 0 < fill_factor <= 1:
        raise ValueError(f"fill_factor must be in (0, 1], got {fill_factor}")
    if current_partitions < 0:
        raise ValueError(f"current_partitions must be >= 0, got {current_partitions}")
    needed = max(1, current_partitions)
    enabled = limits.enabled()
    for total, axis in (
        (total_msg_rate, Limit.MSG_RATE),
        (total_throughput_bytes, Limit.BANDWIDTH),
    ):
        limit = enabled.get(axis)
        if limit is None or total <= 0:
            continue
        target = limit * fill_factor
        count = max(1, math.ceil(total / target))
        # Float rounding: make sure total / count really is under the target.
        while total / count > target:
            count += 1
        needed = max(needed, count)
    return needed


@dataclass(frozen=True, slots=True)
class LoneHotTopic:
    """A topic over a bundle limit alone, and the partition count that fixes it."""

    cluster: str
    namespace: str
    topic: str  # the partitioned topic's name (or the non-partitioned topic itself)
    hot_topic: str  # the partition (or topic) over the limit
    bundle: str  # the bundle holding `hot_topic`
    msg_rate: float  # of `hot_topic`, msg/s in + out
    throughput_bytes: float  # of `hot_topic`, bytes/s in + out
    current_partitions: int  # 0: not partitioned
    recommended_partitions: int

    @property
    def skewed(self) -> bool:
        """The partitions together fit at the current count: the load is uneven (a hot key?),
        and more partitions alone will not spread it."""
        return self.recommended_partitions <= max(1, self.current_partitions)

    @property
    def remedy(self) -> str:
        """What to do about it, in one phrase."""
        if self.skewed:
            return "uneven load across its partitions (hot key?): more partitions alone won't help"
        now = (
            f"{self.current_partitions} partitions"
            if self.current_partitions
            else "not partitioned"
        )
        return f"make it {self.recommended_partitions} partitions (now {now})"

    def to_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "namespace": self.namespace,
            "topic": self.topic,
            "hot_topic": self.hot_topic,
            "bundle": self.bundle,
            "msg_rate": self.msg_rate,
            "throughput_bytes": self.throughput_bytes,
            "current_partitions": self.current_partitions,
            "recommended_partitions": self.recommended_partitions,
            "skewed": self.skewed,
            "remedy": self.remedy,
        }


def over_alone(topic: TopicLoad, limits: BundleLimits) -> bool:
    """The topic alone exceeds the msgRate or bandwidth limit of its bundle."""
    # Only the flows: topic and session counts do not shrink with more partitions.
    return is_over(
        LoadTotals(msg_rate=topic.msg_rate, throughput_bytes=topic.throughput_bytes), limits
    )


def lone_hot_topics(
    bundles: Iterable[BundleLoad],
    *,
    limits_for: Callable[[str], BundleLimits],
    fill_factor: float,
) -> list[LoneHotTopic]:
    """Every topic alone over its bundle's msgRate or bandwidth limit, with its remedy.

    A partitioned topic's current count and total load come from the partitions seen in
    `bundles` (count: highest index seen + 1; load: the sum of the partitions seen).
    """
    bundles = list(bundles)
    partitions: dict[tuple[str, str], list[TopicLoad]] = {}
    for b in bundles:
        for t in b.topics:
            base = _base_name(t.topic)
            if base is not None:
                partitions.setdefault((b.cluster, base[0]), []).append(t)
    out: dict[tuple[str, str], LoneHotTopic] = {}
    for b in bundles:
        limits = limits_for(b.namespace)
        for t in b.topics:
            base = _base_name(t.topic)
            if base is None or not over_alone(t, limits):
                continue
            key = (b.cluster, base[0])
            seen = partitions.get(key, [t])
            indexes = [i for s in seen if (n := _base_name(s.topic)) is not None for i in (n[1],)]
            current = 0 if base[1] < 0 else max(indexes) + 1
            count = recommended_partitions(
                current_partitions=current,
                total_msg_rate=sum(s.msg_rate for s in seen),
                total_throughput_bytes=sum(s.throughput_bytes for s in seen),
                limits=limits,
                fill_factor=fill_factor,
            )
            previous = out.get(key)
            if previous is not None and previous.msg_rate >= t.msg_rate:
                continue  # several hot partitions of one topic: one row, the hottest
            out[key] = LoneHotTopic(
                cluster=b.cluster,
                namespace=b.namespace,
                topic=base[0],
                hot_topic=t.topic,
                bundle=str(b.bundle),
                msg_rate=t.msg_rate,
                throughput_bytes=t.throughput_bytes,
                current_partitions=current,
                recommended_partitions=count,
            )
    return sorted(out.values(), key=lambda h: (h.cluster, h.topic))


def _base_name(topic: str) -> tuple[str, int] | None:
    """(partitioned topic name, partition index; -1 when not a partition), None if invalid."""
    try:
        name = parse_topic(topic)
    except InvalidTopicName:
        return None
    index = name.partition_index
    return (name.base.full, -1 if index is None else index)
