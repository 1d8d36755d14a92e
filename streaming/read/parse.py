"""Kafka records -> typed Arrow rows, through the domain core's single validator.

`RecordParser` turns the Kafka records of one partition range into Arrow batches holding a
`PACK` row per (bucket, pane) of a flush's valid events (`streaming.shared.packing`) and a
`REJECT` row per rejected message/envelope entry (never raising for bad input), and counts
what it saw in a `ReadSummary` (its `SUMMARY` row). The Python Kafka source runs it inside
its read tasks; the native-Kafka path through `parse_records`, from `mapInArrow`: the same
code either way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from balancer.core.events import (
    COUNT_FIELDS,
    DEFAULT_MAX_FUTURE_SKEW_MS,
    MAX_TIMESTAMP_MS,
    RATE_FIELDS,
    SIZE_FIELDS,
    Rejection,
    RejectReason,
    TopicStatsEvent,
    parse_message,
)
from balancer.core.round_marker import is_round_marker, parse_round_marker
from streaming.read.fastparse import FastEvent, decode_fast, decode_single_events
from streaming.read.topic_columns import CanonicalNames, DedupeChoice, topic_columns
from streaming.shared.packing import PACK_SCHEMA, pack_events
from streaming.shared.schema import LATEST_COLUMNS, PARSED_ARROW_SCHEMA, RATE_COLUMNS, RowKind
from streaming.shared.topic_keys import KEY_COLUMN, ClusterHashes

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


_NAMES = tuple(PARSED_ARROW_SCHEMA.names)
_KIND = _NAMES.index("kind")
_PARTITION = _NAMES.index("kafka_partition")
_OFFSET = _NAMES.index("kafka_offset")


# An accepted event from either path: the same field names.
Accepted = FastEvent | TopicStatsEvent
Row = tuple[object, ...]  # one parsed row, in PARSED_ARROW_SCHEMA's column order


def _other_row(kind: RowKind, partition: int, offset: int, **values: object) -> Row:
    row: list[object] = [values.get(name) for name in _NAMES]
    row[_KIND], row[_PARTITION], row[_OFFSET] = int(kind), partition, offset
    return tuple(row)


def _to_batch(rows: list[Row]) -> pa.RecordBatch:
    # Rows are tuples in schema order; one transpose in C beats appending to 22 lists.
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in _NAMES]
    arrays = [
        pa.array(column, type=field.type)
        for column, field in zip(columns, PARSED_ARROW_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=PARSED_ARROW_SCHEMA)


_TIMESTAMP_MS = attrgetter("timestamp_ms")
_CLUSTER = attrgetter("cluster")
_TOPIC = attrgetter("topic")

# One per Python worker process: workers are reused across micro-batches.
_TOPIC_NAMES = CanonicalNames()
_DEDUPE = DedupeChoice()
_CLUSTER_HASHES = ClusterHashes()


def clear_topic_cache() -> None:
    """Forget the topic names this worker has seen (benchmarks of a read task's cold path)."""
    _TOPIC_NAMES.clear()


# The event's value fields (Pulsar's names) and their row columns, in the same order.
_EVENT_FIELDS = (*RATE_FIELDS, *SIZE_FIELDS, *COUNT_FIELDS)
_EVENT_COLUMNS = (*RATE_COLUMNS, *LATEST_COLUMNS)
_FLOAT_COLUMNS: dict[str, type[np.floating[Any]]] = dict.fromkeys(RATE_COLUMNS, np.float64)


def _numbers(
    objects: Sequence[object], name: str, n: int, dtype: type[np.generic] = np.int64
) -> pa.Array:
    """Attribute `name` of each object as an Arrow array (counts and sizes fit int64: the
    validators bound them)."""
    return pa.array(np.fromiter(map(attrgetter(name), objects), dtype=dtype, count=n))


class RecordParser:
    """Parses records into Arrow batches.

    Well-formed messages take the fast path (`streaming.read.fastparse.decode_fast`); any other
    message is judged by `balancer.core.events.parse_message`, which gives the exact reason.
    Accepted events are kept as objects until `flush` builds the columns in one go.

    `now_ms` (the reader's clock, read by the caller) rejects events stamped more than
    `max_future_skew_ms` ahead; `clusters` rejects events of clusters not configured.
    """

    def __init__(
        self,
        *,
        num_buckets: int,
        slide_ms: int,
        summary: ReadSummary,
        names: CanonicalNames | None = None,
        dedupe: DedupeChoice | None = None,
        now_ms: int | None = None,
        max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS,
        clusters: frozenset[str] | None = None,
    ) -> None:
        self.num_buckets = num_buckets
        self.slide_ms = slide_ms
        self.summary = summary
        self.now_ms = now_ms
        self.max_future_skew_ms = max_future_skew_ms
        self.clusters = clusters
        # Newest event time accepted on the fast path (the slow path judges anything later).
        self._latest_ms = None if now_ms is None else now_ms + max_future_skew_ms
        self._names = _TOPIC_NAMES if names is None else names
        self._dedupe = _DEDUPE if dedupe is None else dedupe
        # Accepted events and their topics' full names, in arrival order.
        self._events: list[Accepted] = []
        self._full_names: list[str] = []
        self._first: tuple[int, int] = (-1, -1)  # (partition, offset) of the first kept event
        self._rejects: list[Row] = []
        self._marks: list[Row] = []

    def __len__(self) -> int:
        return len(self._events) + len(self._rejects) + len(self._marks)

    def add(self, value: bytes | None, partition: int, offset: int) -> None:
        """Parse one Kafka record value (a single event or a `{"events": [...]}` envelope)."""
        self.summary.messages += 1
        raw = b"" if value is None else value
        if is_round_marker(raw):
            self._add_marker(raw, partition, offset)
            return
        fast = decode_fast(raw)
        if fast is not None and self._accept_all(fast, partition, offset):
            return
        self._add_slow(raw, partition, offset)

    def add_run(
        self, values: Sequence[bytes | None], partition: int, offsets: Sequence[int], *, limit: int
    ) -> int:
        """`add` the records of a run in order until the parser holds `limit` rows or more.

        Returns how many records were added (the caller flushes, then passes the rest).
        The rows are exactly those of `add` called record by record with a flush whenever
        `limit` is reached: a run of single well-formed events that all pass is kept in one
        go (`decode_single_events`), anything else goes record by record.
        """
        room = limit - len(self)
        if room <= 0:
            return 0
        head = values[:room]  # one row each on the fast path: the limit is never passed
        events = decode_single_events(head)
        if events and self._accept_all(events, partition, offsets[0]):
            self.summary.messages += len(head)
            return len(head)
        for index, (value, offset) in enumerate(zip(values, offsets, strict=True)):
            self.add(value, partition, offset)
            if len(self) >= limit:
                return index + 1
        return len(values)

    def _accept_all(self, events: list[FastEvent], partition: int, offset: int) -> bool:
        """Keep `events` if every rule holds (else the slow path judges them, with reasons).

        `offset` is the first event's record; map() keeps each rule's loop in C.
        """
        latest_ms = self._latest_ms
        if latest_ms is not None and max(map(_TIMESTAMP_MS, events), default=0) > latest_ms:
            return False
        if self.clusters is not None and not self.clusters.issuperset(map(_CLUSTER, events)):
            return False
        full_names = self._names.full_names(list(map(_TOPIC, events)))
        if full_names is None:
            return False
        self._keep(events, full_names, partition, offset)
        return True

    def _keep(
        self, events: Sequence[Accepted], full_names: Sequence[str], partition: int, offset: int
    ) -> None:
        n = len(events)
        if not self._events:
            self._first = (partition, offset)
        self._events.extend(events)
        self._full_names.extend(full_names)
        self.summary.events += n

    def _add_slow(self, raw: bytes, partition: int, offset: int) -> None:
        results = parse_message(
            raw,
            now_ms=self.now_ms,
            max_future_skew_ms=self.max_future_skew_ms,
            clusters=self.clusters,
        )
        many = len(results) > 1
        for index, e in enumerate(results):
            if isinstance(e, Rejection):
                self._reject(raw, e, partition, offset, index if many else None)
                continue
            self._keep([e], [e.topic], partition, offset)  # parse_message gives full names

    def _add_marker(self, raw: bytes, partition: int, offset: int) -> None:
        until = parse_round_marker(
            raw, now_ms=self.now_ms, max_future_skew_ms=self.max_future_skew_ms
        )
        if isinstance(until, Rejection):
            self._reject(raw, until, partition, offset, None)
            return
        # Not capped at the reader's clock as a pack's time is: the collector promises that
        # nothing older than the next round will come, which lies ahead by design.
        self._marks.append(_other_row(RowKind.MARK, partition, offset, event_time=until * 1000))
        self.summary.marks += 1

    def _reject(
        self, raw: bytes, rejection: Rejection, partition: int, offset: int, index: int | None
    ) -> None:
        detail = rejection.detail if index is None else f"event {index}: {rejection.detail}"
        kept = raw[:MAX_DEAD_LETTER_RAW_BYTES]
        if len(kept) < len(raw):
            detail += f" (raw bytes truncated to {len(kept)} of {len(raw)})"
        self._rejects.append(
            _other_row(
                RowKind.REJECT, partition, offset, reason=str(rejection.reason), detail=detail,
                raw=kept,
            )
        )  # fmt: skip
        self.summary.rejected[str(rejection.reason)] += 1

    def flush(self) -> pa.RecordBatch:
        """The rows parsed since the last flush: the events, then the rejects and marks."""
        events = self._event_batch()
        others = _to_batch(self._rejects + self._marks)
        self._events, self._full_names = [], []
        self._rejects, self._marks = [], []
        if others.num_rows == 0:
            return events
        if events.num_rows == 0:
            return others
        return pa.concat_batches([events, others])

    def _event_batch(self) -> pa.RecordBatch:
        """The accepted events as packs: one row per (bucket, pane) (`streaming.shared.packing`)."""
        events, n = self._events, len(self._events)
        if n == 0:
            return _to_batch([])
        topics = topic_columns(self._full_names, self.num_buckets, dedupe=self._dedupe.dedupe())
        if topics.distinct is not None:
            self._dedupe.measured(topics.distinct, n)
        timestamps_ms = _numbers(events, "timestamp_ms", n)
        # map(attrgetter) keeps each column's loop in C; numbers go straight into numpy
        # arrays (a list of Python numbers first took 3-4x as long,
        # docs/decisions.md#read-task-columns-straight-into-numpy).
        clusters = pa.array(list(map(attrgetter("cluster"), events))).dictionary_encode()
        columns: dict[str, list[object] | pa.Array] = {
            "cluster": clusters,
            "namespace": topics.namespace,
            "topic": topics.topic,
            "position": pa.array(topics.position),
            "event_ms": timestamps_ms,
        }
        for name, column in zip(_EVENT_FIELDS, _EVENT_COLUMNS, strict=True):
            columns[column] = _numbers(events, name, n, _FLOAT_COLUMNS.get(column, np.int64))
        columns[KEY_COLUMN] = pa.array(_CLUSTER_HASHES.keys(topics.key_part, clusters))
        table = pa.table(columns, schema=PACK_SCHEMA)
        packs = pack_events(table, topics.bucket, slide_ms=self.slide_ms)
        # The packs already count their events per pane and know their newest time.
        for pack in packs:
            self.summary.pane_events[pack.pane_start_ms] += pack.events
        newest_ms = max(pack.max_event_ms for pack in packs)
        self.summary.newest_event_ms = max(self.summary.newest_event_ms, newest_ms)
        m = len(packs)
        cap_ms = MAX_TIMESTAMP_MS if self.now_ms is None else self.now_ms
        arrays = {
            "kind": pa.array(np.full(m, int(RowKind.PACK), dtype=np.int32)),
            "bucket": pa.array([p.bucket for p in packs], pa.int32()),
            # The watermark follows the newest event time Spark sees: capped at the reader's
            # clock, an event stamped ahead (within the skew) keeps its window but cannot
            # move the watermark past the stream and make on-time events late.
            "event_time": pa.array(
                [min(p.max_event_ms, cap_ms) * 1000 for p in packs], pa.timestamp("us", tz="UTC")
            ),
            "pane_start": pa.array([p.pane_start_ms for p in packs], pa.int64()),
            "events": pa.array([p.events for p in packs], pa.int64()),
            "payload": pa.array([p.payload for p in packs], pa.binary()),
            # A pack spans many offsets: the first record of the flush locates it.
            "kafka_partition": pa.array([self._first[0]] * m, pa.int32()),
            "kafka_offset": pa.array([self._first[1]] * m, pa.int64()),
        }
        return pa.RecordBatch.from_arrays(
            [arrays.get(f.name, pa.nulls(m, f.type)) for f in PARSED_ARROW_SCHEMA],
            schema=PARSED_ARROW_SCHEMA,
        )

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
    slide_ms: int,
    now_ms: int | None = None,
    max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_MS,
    clusters: frozenset[str] | None = None,
) -> list[pa.RecordBatch]:
    """Parse a run of raw records (any partitions): parsed rows, then one summary per partition.

    Used by the native-Kafka path (`mapInArrow` over Spark's `kafka` source), where the
    reader cannot report a high-water mark. The rules are `RecordParser`'s.
    """
    by_partition: dict[int, RecordParser] = {}
    for value, partition, offset in zip(values, partitions, offsets, strict=True):
        parser = by_partition.get(partition)
        if parser is None:
            parser = RecordParser(
                num_buckets=num_buckets,
                slide_ms=slide_ms,
                summary=ReadSummary(partition=partition, start_offset=offset, next_offset=offset),
                now_ms=now_ms,
                max_future_skew_ms=max_future_skew_ms,
                clusters=clusters,
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
    "clear_topic_cache",
    "parse_records",
]
