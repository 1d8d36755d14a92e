"""One closed window as a replay hands it to every policy: each topic's windowed load with
the broker that reported it, grouped by namespace and sorted by hash position (built once per
window and shared by all policies, so a policy only slices it by its own bundles), and the
newest round context of each cluster (the recorded load reports and layout).

Purely computational, with no side effects.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from balancer.core.bundles import BundleRange
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.replay.recording import RoundContext
from balancer.core.topics import InvalidTopicName, TopicDomain, parse_topic

if TYPE_CHECKING:
    from balancer.core.replay.layout import ReplayLayout

_DOMAINS = tuple(f"{d.value}://" for d in TopicDomain)


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
    # Shared by every policy's layout in this window (they mostly have the same bundles):
    # bundle loads rolled up once, the recorded layout of each cluster's round built once.
    _bundle_loads: dict[tuple[str, str, BundleRange], BundleLoad | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    recorded_layouts: dict[str, ReplayLayout] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

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
            namespace = _namespace_of(topic.load.topic)
            if namespace is None:
                rejected += 1
                continue
            grouped.setdefault((topic.cluster, namespace), []).append(topic)
        window = cls.from_namespaces(window_end_ms, grouped, contexts)
        return cls(window.window_end_ms, window.namespaces, window.contexts, rejected)

    @classmethod
    def from_namespaces(
        cls,
        window_end_ms: int,
        grouped: Mapping[tuple[str, str], Iterable[WindowTopic]],
        contexts: Mapping[str, RoundContext],
    ) -> ReplayWindow:
        """From topics already grouped by (cluster, tenant/ns), as an engine that grouped
        them itself hands them (no name is parsed; each group is sorted by position)."""
        namespaces: dict[tuple[str, str], NamespaceWindow] = {}
        for key in sorted(grouped):
            members = sorted(grouped[key], key=lambda t: (t.load.position, t.load.topic))
            namespaces[key] = NamespaceWindow(
                cluster=key[0],
                namespace=key[1],
                topics=tuple(members),
                positions=tuple(t.load.position for t in members),
            )
        return cls(window_end_ms, namespaces, dict(contexts))

    def topics(self) -> Iterable[WindowTopic]:
        for ns in self.namespaces.values():
            yield from ns.topics

    def bundle_load(self, cluster: str, namespace: str, bundle: BundleRange) -> BundleLoad | None:
        """The window's topics in `bundle` rolled up (`roll_up`), None when it has none."""
        key = (cluster, namespace, bundle)
        if key in self._bundle_loads:
            return self._bundle_loads[key]
        nsw = self.namespaces.get((cluster, namespace))
        members = nsw.in_bundle(bundle) if nsw else ()
        load = (
            roll_up(
                cluster=cluster,
                namespace=namespace,
                bundle=bundle,
                window_end_ms=self.window_end_ms,
                topics=tuple(t.load for t in members),
            )
            if members
            else None
        )
        self._bundle_loads[key] = load
        return load


def _namespace_of(full_name: str) -> str | None:
    """`tenant/ns` of a topic name; the stream's names are full ones, split without a parse
    (the hot path: every topic of every window), anything else parsed."""
    if full_name.startswith(_DOMAINS):
        parts = full_name.split("/", 4)
        if len(parts) == 5 and all(parts[2:]):
            return f"{parts[2]}/{parts[3]}"
    try:
        return parse_topic(full_name).namespace_name
    except InvalidTopicName:
        return None
