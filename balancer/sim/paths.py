"""Where a topic's managed-ledger metadata would live, with or without PIP-157 topic buckets
(a debug view of the simulator: Pulsar never shipped buckets)."""

from __future__ import annotations

from typing import Any

from balancer.sim.model import SimError
from balancer.topics import TopicName


def metadata_path(topic: TopicName, buckets: int | None) -> dict[str, Any]:
    """`{"topic", "numberOfTopicBuckets", "bucket", "path"}` for a namespace's bucket count."""
    if not buckets:
        return {
            "topic": topic.full,
            "numberOfTopicBuckets": None,
            "bucket": None,
            "path": _unbucketed(topic),
        }
    try:
        from balancer import buckets as bucket_layout  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # pragma: no cover - until balancer.buckets lands
        raise SimError(501, "topic buckets are not available in this build") from None
    bucket = bucket_layout.topic_bucket(topic.local_name, buckets)
    path = bucket_layout.metadata_path(topic, buckets)
    return {"topic": topic.full, "numberOfTopicBuckets": buckets, "bucket": bucket, "path": path}


def _unbucketed(topic: TopicName) -> str:
    t = topic
    return f"/managed-ledgers/{t.tenant}/{t.namespace}/{t.domain.value}/{t.local_name}"
