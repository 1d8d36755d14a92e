"""Kafka records -> typed Arrow rows, through the foundation's single validator.

`parse_records` turns a run of Kafka records of one partition into one Arrow batch holding a
row per valid event and a row per rejected message/envelope entry (never raising for bad
input), and counts what it saw in a `ReadSummary`. The Python Kafka source calls it inside
its read tasks; the native-Kafka path calls it from `mapInArrow`: the same code either way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from balancer.buckets import topic_bucket
from balancer.events import Rejection, RejectReason, TopicStatsEvent, parse_message
from balancer.hashing import hash_position
from streaming.schema import PARSED_ARROW_SCHEMA, RowKind

# A dead letter keeps at most this many bytes of the original message, so that a huge
# rejected message still fits a Kafka dead-letter topic (default max message size 1 MiB).
MAX_DEAD_LETTER_RAW_BYTES = 512 * 1024


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
    event_times: Counter[int] = field(default_factory=Counter)  # event time (ms) -> events

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
                "event_times": {str(k): v for k, v in self.event_times.items()},
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
            event_times=Counter({int(k): int(v) for k, v in obj["event_times"].items()}),
        )


class _Columns:
    """Column lists for one Arrow batch of parsed rows."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {name: [] for name in PARSED_ARROW_SCHEMA.names}

    def __len__(self) -> int:
        return len(self.data["kind"])

    def add_event(self, event: TopicStatsEvent, partition: int, offset: int, bucket: int) -> None:
        d = self.data
        d["kind"].append(RowKind.EVENT)
        d["cluster"].append(event.cluster)
        d["namespace"].append(event.namespace)
        d["topic"].append(event.topic)
        d["position"].append(hash_position(event.topic))
        d["bucket"].append(bucket)
        d["event_time"].append(event.timestamp_ms * 1000)
        d["msg_rate_in"].append(event.msgRateIn)
        d["msg_rate_out"].append(event.msgRateOut)
        d["msg_throughput_in"].append(event.msgThroughputIn)
        d["msg_throughput_out"].append(event.msgThroughputOut)
        d["storage_size"].append(event.storageSize)
        d["backlog_size"].append(event.backlogSize)
        d["offloaded_storage_size"].append(event.offloadedStorageSize)
        d["producer_count"].append(event.producerCount)
        d["consumer_count"].append(event.consumerCount)
        d["kafka_partition"].append(partition)
        d["kafka_offset"].append(offset)
        for name in ("reason", "detail", "raw", "summary"):
            d[name].append(None)

    def add_other(self, kind: RowKind, partition: int, offset: int, **values: Any) -> None:
        for name, column in self.data.items():
            if name == "kind":
                column.append(kind)
            elif name == "kafka_partition":
                column.append(partition)
            elif name == "kafka_offset":
                column.append(offset)
            else:
                column.append(values.get(name))

    def to_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.data, schema=PARSED_ARROW_SCHEMA)


class RecordParser:
    """Parses records into Arrow batches; keeps a per-task cache of topic -> bucket."""

    def __init__(self, *, num_buckets: int, summary: ReadSummary) -> None:
        self.num_buckets = num_buckets
        self.summary = summary
        self._buckets: dict[str, int] = {}
        self._columns = _Columns()

    def __len__(self) -> int:
        return len(self._columns)

    def add(self, value: bytes | None, partition: int, offset: int) -> None:
        """Parse one Kafka record value (a single event or a `{"events": [...]}` envelope)."""
        self.summary.messages += 1
        raw = b"" if value is None else value
        results = parse_message(raw)
        many = len(results) > 1
        for index, result in enumerate(results):
            if isinstance(result, Rejection):
                self._reject(raw, result, partition, offset, index if many else None)
                continue
            bucket = self._buckets.get(result.topic)
            if bucket is None:
                bucket = topic_bucket(result.topic, self.num_buckets)
                self._buckets[result.topic] = bucket
            self._columns.add_event(result, partition, offset, bucket)
            self.summary.events += 1
            self.summary.event_times[result.timestamp_ms] += 1

    def _reject(
        self, raw: bytes, rejection: Rejection, partition: int, offset: int, index: int | None
    ) -> None:
        detail = rejection.detail if index is None else f"event {index}: {rejection.detail}"
        kept = raw[:MAX_DEAD_LETTER_RAW_BYTES]
        if len(kept) < len(raw):
            detail += f" (raw bytes truncated to {len(kept)} of {len(raw)})"
        self._columns.add_other(
            RowKind.REJECT,
            partition,
            offset,
            reason=str(rejection.reason),
            detail=detail,
            raw=kept,
        )
        self.summary.rejected[str(rejection.reason)] += 1

    def flush(self) -> pa.RecordBatch:
        """The rows parsed since the last flush."""
        batch = self._columns.to_batch()
        self._columns = _Columns()
        return batch

    def summary_batch(self) -> pa.RecordBatch:
        """A one-row batch carrying the task's `ReadSummary`."""
        columns = _Columns()
        columns.add_other(
            RowKind.SUMMARY,
            self.summary.partition,
            self.summary.next_offset,
            summary=self.summary.to_json(),
        )
        return columns.to_batch()


def parse_records(
    values: Sequence[bytes | None],
    partitions: Sequence[int],
    offsets: Sequence[int],
    *,
    num_buckets: int,
) -> list[pa.RecordBatch]:
    """Parse a run of raw records (any partitions): parsed rows, then one summary per partition.

    Used by the native-Kafka path (`mapInArrow` over Spark's `kafka` source), where the
    reader cannot report a high-water mark.
    """
    by_partition: dict[int, RecordParser] = {}
    for value, partition, offset in zip(values, partitions, offsets, strict=True):
        parser = by_partition.get(partition)
        if parser is None:
            parser = RecordParser(
                num_buckets=num_buckets,
                summary=ReadSummary(partition=partition, start_offset=offset, next_offset=offset),
            )
            by_partition[partition] = parser
        parser.add(value, partition, offset)
        parser.summary.next_offset = max(parser.summary.next_offset, offset + 1)
    out: list[pa.RecordBatch] = []
    for parser in by_partition.values():
        out.append(parser.flush())
        out.append(parser.summary_batch())
    return out


__all__ = [
    "MAX_DEAD_LETTER_RAW_BYTES",
    "ReadSummary",
    "RecordParser",
    "RejectReason",
    "parse_records",
]
