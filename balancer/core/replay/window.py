"""One closed window as a replay hands it to every policy: each topic's windowed load with
the broker that reported it, grouped by namespace and sorted by hash position (built once per
window and shared by all policies, so a policy only slices it by its own bundles), and the
newest round context of each cluster (the recorded load reports and layout).

Purely computational, with no side effects.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from balancer.core.bundles import BundleRange
from balancer.core.load import TopicLoad
from balancer.core.replay.recording import RoundContext
from balancer.core.topics import InvalidTopicName, parse_topic


@dataclass(frozen=True, slots=True)
class WindowTopic:
    """A topic's load over the window, as the recording has it."""

    cluster: str
    load: TopicLoad
    broker: str  # the broker whose stats reported the topic in the window


@dataclass(frozen=True, slots=True)
class NamespaceWindow:
    """One namespace's topics in the window, sorted by hash position."""

    cluster: str
    namespace: str  # tenant/ns
    topics: tuple[WindowTopic, ...]
    positions: tuple[int, ...]  # the topics' positions, same order

    def in_bundle(self, bundle: BundleRange) -> tuple[WindowTopic, ...]:
        """The topics whose position lies in `bundle` (0xffffffff in the last bundle)."""
        lo = bisect_left(self.positions, bundle.lower)
        if bundle.is_last:
            hi = bisect_right(self.positions, bundle.upper)
        else:
            hi = bisect_left(self.positions, bundle.upper)
        return self.topics[lo:hi]


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """A closed window: the topics' loads and each cluster's newest round context."""

    window_end_ms: int
    namespaces: Mapping[tuple[str, str], NamespaceWindow]  # (cluster, tenant/ns) -> topics
    contexts: Mapping[str, RoundContext]  # cluster -> newest round at or before the end
    # Topics whose name is no topic name (the stream parsed them, so none are expected):
    # counted here rather than placed in a guessed namespace.
    rejected_topics: int = 0

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
            try:
                namespace = parse_topic(topic.load.topic).namespace_name
            except InvalidTopicName:
                rejected += 1
                continue
            grouped.setdefault((topic.cluster, namespace), []).append(topic)
        namespaces: dict[tuple[str, str], NamespaceWindow] = {}
        for key in sorted(grouped):
            members = sorted(grouped[key], key=lambda t: (t.load.position, t.load.topic))
            namespaces[key] = NamespaceWindow(
                cluster=key[0],
                namespace=key[1],
                topics=tuple(members),
                positions=tuple(t.load.position for t in members),
            )
        return cls(window_end_ms, namespaces, dict(contexts), rejected)

    def topics(self) -> Iterable[WindowTopic]:
        for ns in self.namespaces.values():
            yield from ns.topics
