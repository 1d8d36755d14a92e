"""Windowed load values per topic and per bundle: what the stream hands to the detector.

Purely computational, with no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from balancer.core.bundles import BundleRange
from balancer.core.exact_sums import exact_sum


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """A topic's load over one window (rates averaged, sizes and counts the latest)."""

    topic: str  # full name
    position: int  # hash position
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    msg_throughput_out: float = 0.0  # bytes/s
    producer_count: int = 0
    consumer_count: int = 0
    storage_size: int = 0  # bytes
    backlog_size: int = 0  # bytes
    offloaded_storage_size: int = 0  # bytes

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput_bytes(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def sessions(self) -> int:
        return self.producer_count + self.consumer_count


@dataclass(frozen=True, slots=True)
class BundleLoad:
    """A bundle's load over one window, rolled up from its topics."""

    cluster: str
    namespace: str  # tenant/ns
    bundle: BundleRange
    window_end_ms: int
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    msg_throughput_out: float = 0.0  # bytes/s
    topic_count: int = 0
    session_count: int = 0
    reported_topics: int = 0  # topics of the bundle that reported in the window
    known_topics: int = 0  # topics the bundle is known to hold
    topics: tuple[TopicLoad, ...] = field(default=(), compare=False)

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput_bytes(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def completeness(self) -> float:
        """Share of the bundle's known topics that reported in the window (1.0 if none known)."""
        if self.known_topics <= 0:
            return 1.0
        return min(1.0, self.reported_topics / self.known_topics)


def roll_up(
    *,
    cluster: str,
    namespace: str,
    bundle: BundleRange,
    window_end_ms: int,
    topics: tuple[TopicLoad, ...],
    known_topics: int | None = None,
) -> BundleLoad:
    """Sum topic loads into one bundle load (the topics must lie in the bundle).

    Rates are exact sums rounded once (`balancer.core.exact_sums`): the same whatever the
    order or grouping of the topics, which is what lets the stream add up per-bucket parts.
    """
    return BundleLoad(
        cluster=cluster,
        namespace=namespace,
        bundle=bundle,
        window_end_ms=window_end_ms,
        msg_rate_in=exact_sum(t.msg_rate_in for t in topics),
        msg_rate_out=exact_sum(t.msg_rate_out for t in topics),
        msg_throughput_in=exact_sum(t.msg_throughput_in for t in topics),
        msg_throughput_out=exact_sum(t.msg_throughput_out for t in topics),
        topic_count=len(topics),
        session_count=sum(t.sessions for t in topics),
        reported_topics=len(topics),
        known_topics=len(topics) if known_topics is None else known_topics,
        topics=topics,
    )
