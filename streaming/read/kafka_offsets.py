"""The Kafka source's offsets on the driver: read limits and the topic's partitions and ends.

Purely computational (`split_limit`), or a few metadata and fetch requests through the
driver's kafka-python consumer; the read tasks' records are `streaming.read.partition_range`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # kafka-python is imported where a consumer is made
    from kafka import KafkaConsumer


def split_limit(
    start: Mapping[int, int], available: Mapping[int, int], limit: int
) -> dict[int, int]:
    """End offsets reading at most `limit` records in all, shared in proportion to the backlog.

    Purely computational. Each partition with a backlog first gets one record (the largest
    backlogs first when the limit is smaller than the number of such partitions), so a small
    partition is never starved by a big one; the rest is shared in proportion.
    """
    backlog = {p: max(0, available[p] - start.get(p, 0)) for p in available}
    total = sum(backlog.values())
    if total <= limit:
        return {p: start.get(p, 0) + n for p, n in backlog.items()}
    busy = sorted((p for p in backlog if backlog[p]), key=lambda q: (-backlog[q], q))
    take = dict.fromkeys(backlog, 0)
    for p in busy[:limit]:
        take[p] = 1
    left = limit - sum(take.values())
    rest = {p: backlog[p] - take[p] for p in backlog}
    rest_total = sum(rest.values())
    if left > 0 and rest_total > 0:
        share = {p: (n * left) // rest_total for p, n in rest.items()}
        spare = left - sum(share.values())
        # Largest remainders first: the rounding never leaves capacity unused.
        order = sorted(rest, key=lambda q: ((rest[q] * left) % rest_total, rest[q]), reverse=True)
        for p in order:
            if spare <= 0:
                break
            if share[p] < rest[p]:
                share[p] += 1
                spare -= 1
        for p in share:
            take[p] += share[p]
    return {p: start.get(p, 0) + take[p] for p in backlog}


def topic_partitions(consumer: KafkaConsumer, topic: str, *, refresh: bool = False) -> set[int]:
    """The partitions of `topic` in the cluster's metadata (empty: no such topic yet).

    `refresh`: ask the cluster now rather than trust the consumer's cached metadata.
    """
    parts = None if refresh else consumer.partitions_for_topic(topic)
    if not parts:
        consumer.topics()  # a metadata request: the topic may have just been created
        parts = consumer.partitions_for_topic(topic)
    return set(parts or ())


def fetch_high_watermarks(
    consumer: KafkaConsumer, topic: str, positions: Mapping[int, int], *, timeout_s: float = 10.0
) -> dict[int, int]:
    """High-water mark of every partition of `topic`, as the fetch responses report it.

    Seeks each partition to `positions` (the last known end, so little data is fetched) and
    polls until every partition has answered; fresh assignments make stale values impossible.
    """
    from kafka import TopicPartition

    parts = topic_partitions(consumer, topic)
    if not parts:
        return {}
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign([])
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, positions.get(tp.partition, 0))
    deadline = time.monotonic() + timeout_s
    marks: dict[int, int] = {}
    while True:
        for tp in tps:
            mark = consumer.highwater(tp)
            if mark is not None:
                marks[tp.partition] = int(mark)
        if len(marks) == len(tps):
            return marks
        if time.monotonic() > deadline:
            missing = sorted(set(parts) - set(marks))
            raise TimeoutError(
                f"topic {topic}: no fetch response for partition(s) {missing} in {timeout_s} s"
            )
        consumer.poll(timeout_ms=100)
