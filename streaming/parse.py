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
from balancer.events import Rejection, RejectReason, parse_message
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


_NAMES = tuple(PARSED_ARROW_SCHEMA.names)
_KIND = _NAMES.index("kind")
_PARTITION = _NAMES.index("kafka_partition")
_OFFSET = _NAMES.index("kafka_offset")


def _other_row(kind: RowKind, partition: int, offset: int, **values: Any) -> tuple[Any, ...]:
    row = [values.get(name) for name in _NAMES]
    row[_KIND], row[_PARTITION], row[_OFFSET] = int(kind), partition, offset
    return tuple(row)


def _to_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    # Rows are tuples in schema order; one transpose in C beats appending to 22 lists.
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in _NAMES]
    arrays = [
        pa.array(column, type=field.type)
        for column, field in zip(columns, PARSED_ARROW_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=PARSED_ARROW_SCHEMA)


class RecordParser:
    """Parses records into Arrow batches; caches each topic's namespace, position and bucket."""

    def __init__(self, *, num_buckets: int, summary: ReadSummary) -> None:
        self.num_buckets = num_buckets
        self.summary = summary
        self._topics: dict[str, tuple[str, int, int]] = {}
        self._rows: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self._rows)

    def _topic_info(self, topic: str) -> tuple[str, int, int]:
        info = self._topics.get(topic)
        if info is None:
            namespace = topic.split("://", 1)[1].rsplit("/", 1)[0]
            info = (namespace, hash_position(topic), topic_bucket(topic, self.num_buckets))
            self._topics[topic] = info
        return info

    def add(self, value: bytes | None, partition: int, offset: int) -> None:
        """Parse one Kafka record value (a single event or a `{"events": [...]}` envelope)."""
        summary = self.summary
        summary.messages += 1
        raw = b"" if value is None else value
        results = parse_message(raw)
        many = len(results) > 1
        append = self._rows.append
        for index, e in enumerate(results):
            if isinstance(e, Rejection):
                self._reject(raw, e, partition, offset, index if many else None)
                continue
            namespace, position, bucket = self._topic_info(e.topic)
            append(
                (
                    RowKind.EVENT.value, e.cluster, namespace, e.topic, position, bucket,
                    e.timestamp_ms * 1000, e.msgRateIn, e.msgRateOut, e.msgThroughputIn,
                    e.msgThroughputOut, e.storageSize, e.backlogSize, e.offloadedStorageSize,
                    e.producerCount, e.consumerCount, partition, offset, None, None, None, None,
                )
            )  # fmt: skip
            summary.events += 1
            summary.event_times[e.timestamp_ms] += 1

    def _reject(
        self, raw: bytes, rejection: Rejection, partition: int, offset: int, index: int | None
    ) -> None:
        detail = rejection.detail if index is None else f"event {index}: {rejection.detail}"
        kept = raw[:MAX_DEAD_LETTER_RAW_BYTES]
        if len(kept) < len(raw):
            detail += f" (raw bytes truncated to {len(kept)} of {len(raw)})"
        self._rows.append(
            _other_row(
                RowKind.REJECT, partition, offset, reason=str(rejection.reason), detail=detail,
                raw=kept,
            )
        )  # fmt: skip
        self.summary.rejected[str(rejection.reason)] += 1

    def flush(self) -> pa.RecordBatch:
        """The rows parsed since the last flush."""
        batch = _to_batch(self._rows)
        self._rows = []
        return batch

    def summary_batch(self) -> pa.RecordBatch:
        """A one-row batch carrying the task's `ReadSummary`."""
        s = self.summary
        row = _other_row(RowKind.SUMMARY, s.partition, s.next_offset, summary=s.to_json())
        return _to_batch([row])


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
