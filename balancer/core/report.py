"""What each micro-batch of the stream hands on: the `BatchReport`, and the interfaces for it.

The controller implements `BatchHandler`; the exporter reads `BatchReport`s; a
`LayoutProvider` gives the current bundle boundaries of a namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from balancer.core.bundles import NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad


@dataclass(frozen=True)
class BatchReport:
    batch_id: int
    window_end_ms: int  # end of the newest complete window in this batch (0: none closed)
    bundles: tuple[BundleLoad, ...]  # one per bundle that reported; .topics only when wanted
    large_topics: tuple[tuple[str, TopicLoad], ...]  # (cluster, topic) with storage >= min
    events_consumed: int
    events_rejected: Mapping[str, int]  # reason -> count in this batch
    events_late: int
    kafka_lag: Mapping[int, int]  # partition -> fetch high-water mark - next offset
    watermark_delay_s: float  # wall clock minus the batch's event-time watermark
    duration_s: float
    watermark_ms: int = 0  # the event-time watermark of this batch
    windows_closed: int = 0  # windows completed in this batch (only the newest is reported)
    dead_letters: int = field(default=0)  # dead letters written by this batch
    spark_s: float = 0.0  # of duration_s: running the Spark batch (read, windows, state)
    newest_event_ms: int = 0  # newest event time accepted in this batch (0: no event)
    # Kafka offsets the batch planned but could not read, by why: "partition_gone" (the
    # stats topic was recreated with fewer partitions), "records_lost" (the broker no longer
    # has them, e.g. it came back empty).
    offsets_skipped: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (bundles and topics as plain dicts)."""
        return {
            "batch_id": self.batch_id,
            "window_end_ms": self.window_end_ms,
            "bundles": [_bundle_dict(b) for b in self.bundles],
            "large_topics": [[c, _topic_dict(t)] for c, t in self.large_topics],
            "events_consumed": self.events_consumed,
            "events_rejected": dict(self.events_rejected),
            "events_late": self.events_late,
            "kafka_lag": {str(p): n for p, n in self.kafka_lag.items()},
            "watermark_delay_s": self.watermark_delay_s,
            "duration_s": self.duration_s,
            "watermark_ms": self.watermark_ms,
            "windows_closed": self.windows_closed,
            "dead_letters": self.dead_letters,
            "spark_s": self.spark_s,
            "newest_event_ms": self.newest_event_ms,
            "offsets_skipped": dict(self.offsets_skipped),
        }


def _topic_dict(t: TopicLoad) -> dict[str, Any]:
    return {name: getattr(t, name) for name in TopicLoad.__dataclass_fields__}


def _bundle_dict(b: BundleLoad) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: getattr(b, name) for name in BundleLoad.__dataclass_fields__ if name != "topics"
    }
    out["bundle"] = str(b.bundle)
    out["topics"] = [_topic_dict(t) for t in b.topics]
    return out


class BatchHandler(Protocol):
    offload_min_bytes: int | None

    def wants_topics(self, bundle: BundleLoad) -> bool:
        """True -> the report carries this bundle's per-topic loads."""
        ...

    def handle(self, report: BatchReport) -> None:
        """Must be idempotent per batch_id: a batch is replayed after a crash."""
        ...


class LayoutProvider(Protocol):
    def layout(self, cluster: str, namespace: str) -> NamespaceBundles:
        """Current bundle boundaries (refreshed from the admin API, and after every split)."""
        ...

    def known_topics(self, cluster: str, namespace: str) -> int | None:
        """Topics the namespace is known to hold, for completeness; None = unknown."""
        ...


class StaticLayouts:
    """A `LayoutProvider` from fixed layouts; any other namespace has Pulsar's initial 4 bundles.

    `set_layout` replaces a layout (what a controller does after a split).
    """

    def __init__(
        self,
        layouts: Mapping[tuple[str, str], NamespaceBundles] | None = None,
        *,
        default_bundles: int = 4,
        known: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self._layouts = dict(layouts or {})
        self._default_bundles = default_bundles
        self._known = dict(known or {})

    def layout(self, cluster: str, namespace: str) -> NamespaceBundles:
        found = self._layouts.get((cluster, namespace))
        if found is None:
            found = NamespaceBundles.initial(namespace, self._default_bundles)
            self._layouts[(cluster, namespace)] = found
        return found

    def set_layout(self, cluster: str, layout: NamespaceBundles) -> None:
        self._layouts[(cluster, layout.namespace)] = layout

    def known_topics(self, cluster: str, namespace: str) -> int | None:
        return self._known.get((cluster, namespace))
