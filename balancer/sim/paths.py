"""Where a topic's managed-ledger metadata would live, with or without PIP-157 topic buckets
(a debug view of the simulator; Pulsar never shipped buckets). The layout itself is
`balancer.core.buckets`'; a namespace without `numberOfTopicBuckets` is unbucketed."""

from __future__ import annotations

from typing import Any

from balancer.core.buckets import metadata_path as bucketed_path
from balancer.core.buckets import topic_bucket
from balancer.core.topics import TopicName


def metadata_path(topic: TopicName, buckets: int | None) -> dict[str, Any]:
    """`{"topic", "numberOfTopicBuckets", "bucket", "path"}`; bucket None when unbucketed,
    path None for a non-persistent topic (no managed ledger)."""
    n = buckets or 1
    return {
        "topic": topic.full,
        "numberOfTopicBuckets": buckets,
        "bucket": topic_bucket(topic, n) if n > 1 else None,
        "path": bucketed_path(topic, n),
    }
