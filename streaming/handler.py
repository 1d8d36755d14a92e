"""What each micro-batch hands on: the `BatchReport`, and the interfaces it is handed through.

The controller implements `BatchHandler`; the exporter reads `BatchReport`s; a
`LayoutProvider` gives the current bundle boundaries of a namespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from balancer.bundles import NamespaceBundles
from balancer.load import BundleLoad, TopicLoad


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


class JsonlReportHandler:
    """A `BatchHandler` appending every report as one JSON line (tests, dry runs).

    Replays append again with the same batch_id; a reader keeps the last line per batch_id.
    """

    def __init__(
        self, path: Path, *, offload_min_bytes: int | None = None, topics_for_all: bool = False
    ) -> None:
        self.path = path
        self.offload_min_bytes = offload_min_bytes
        self.topics_for_all = topics_for_all

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return self.topics_for_all

    def handle(self, report: BatchReport) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(report.to_dict(), separators=(",", ":")) + "\n")
            out.flush()


def read_reports(path: Path) -> dict[int, dict[str, Any]]:
    """Reports written by `JsonlReportHandler`, the last one per batch_id."""
    out: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            out[int(obj["batch_id"])] = obj
    return out
