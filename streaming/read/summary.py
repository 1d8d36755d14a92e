"""What one read task saw in one Kafka partition range: its `SUMMARY` row's content."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReadSummary:
    """What one read task saw in one Kafka partition range (JSON in a `SUMMARY` row)."""

    partition: int
    start_offset: int
    next_offset: int
    high_watermark: int | None = None  # from the fetch responses (ListOffsets may be wrong)
    messages: int = 0
    events: int = 0  # valid events
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> count
    # Pane start (ms) -> valid events: the window rule only needs an event's pane (the
    # oldest window holding it ends a slide after its pane starts), and a batch's events
    # span a few panes where their times in ms take ~60k keys (0.2 s a batch through py4j).
    pane_events: Counter[int] = field(default_factory=Counter)
    newest_event_ms: int = 0  # newest valid event time (0: none)
    marks: int = 0  # the collector's round markers read (balancer.core.round_marker)
    # Offsets of the task's range it could not read: records the broker no longer has, or
    # the whole range of a partition the topic no longer has (`vanished`).
    skipped_offsets: int = 0
    vanished: bool = False  # the partition is gone (topic recreated with fewer partitions)

    @property
    def consumed(self) -> int:
        """Events read, valid or not (an envelope counts each of its events)."""
        return self.events + sum(self.rejected.values())

    def to_json(self) -> str:
        return json.dumps(
            {
                "partition": self.partition,
                "start_offset": self.start_offset,
                "next_offset": self.next_offset,
                "high_watermark": self.high_watermark,
                "messages": self.messages,
                "events": self.events,
                "rejected": dict(self.rejected),
                "pane_events": {str(k): v for k, v in self.pane_events.items()},
                "newest_event_ms": self.newest_event_ms,
                "marks": self.marks,
                "skipped_offsets": self.skipped_offsets,
                "vanished": self.vanished,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ReadSummary:
        obj: dict[str, Any] = json.loads(text)
        return cls(
            partition=int(obj["partition"]),
            start_offset=int(obj["start_offset"]),
            next_offset=int(obj["next_offset"]),
            high_watermark=None if obj["high_watermark"] is None else int(obj["high_watermark"]),
            messages=int(obj["messages"]),
            events=int(obj["events"]),
            rejected=Counter({str(k): int(v) for k, v in obj["rejected"].items()}),
            pane_events=Counter({int(k): int(v) for k, v in obj["pane_events"].items()}),
            newest_event_ms=int(obj["newest_event_ms"]),
            marks=int(obj.get("marks", 0)),
            skipped_offsets=int(obj["skipped_offsets"]),
            vanished=bool(obj["vanished"]),
        )


__all__ = ["ReadSummary"]
