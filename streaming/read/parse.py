"""Kafka records -> typed Arrow rows, through the domain core's single validator.

`RecordParser` turns the Kafka records of one partition range into Arrow batches holding a
`PACK` row per (bucket, pane) of a flush's valid events (`streaming.shared.packing`) and a
`REJECT` row per rejected message/envelope entry (never raising for bad input), and counts
what it saw in a `ReadSummary` (its `SUMMARY` row). The Python Kafka source runs it inside
its read tasks; the native-Kafka path through `parse_records`, from `mapInArrow`: the same
code either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, itemgetter

import numpy as np
import pyarrow as pa

from balancer.core.arrow_envelope import decode_envelope, is_arrow_envelope
from balancer.core.events import (
    DEFAULT_MAX_FUTURE_SKEW_MS,
    MAX_TIMESTAMP_MS,
    Rejection,
    RejectReason,
    TopicStatsEvent,
    parse_message,
)
from balancer.core.round_marker import is_round_marker, parse_round_marker
from streaming.read.event_rows import (
    ROWS_SCHEMA,
    VALUE_FIELDS,
    Accepted,
    arrow_verdicts,
    json_rows,
)
from streaming.read.fastparse import FastEvent, decode_fast, decode_single_events
from streaming.read.summary import ReadSummary
from streaming.read.topic_columns import CanonicalNames, DedupeChoice, topic_columns
from streaming.shared.packing import PACK_SCHEMA, pack_events
from streaming.shared.schema import LATEST_COLUMNS, PARSED_ARROW_SCHEMA, RATE_COLUMNS, RowKind
from streaming.shared.topic_keys import KEY_COLUMN, ClusterHashes

# A dead letter keeps at most this many bytes of the original message, so that a huge
# rejected message still fits a Kafka dead-letter topic (default max message size 1 MiB).
MAX_DEAD_LETTER_RAW_BYTES = 512 * 1024


_NAMES = tuple(PARSED_ARROW_SCHEMA.names)
_KIND = _NAMES.index("kind")
_PARTITION = _NAMES.index("kafka_partition")
_OFFSET = _NAMES.index("kafka_offset")


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
_SEQ = itemgetter(0)
_CLUSTER = attrgetter("cluster")
_TOPIC = attrgetter("topic")

# One per Python worker process: workers are reused across micro-batches.
_TOPIC_NAMES = CanonicalNames()
_DEDUPE = DedupeChoice()
_CLUSTER_HASHES = ClusterHashes()


def clear_topic_cache() -> None:
    """Forget the topic names this worker has seen (benchmarks of a read task's cold path)."""
    _TOPIC_NAMES.clear()


# The event's value fields (Pulsar's names) and their pack columns, in the same order.
_EVENT_COLUMNS = dict(zip(VALUE_FIELDS, (*RATE_COLUMNS, *LATEST_COLUMNS), strict=True))


@dataclass
class _Chunk:
    """Kept events of one run of JSON messages or of one Arrow envelope, as columns."""

    # streaming.read.event_rows.ROWS_SCHEMA; an Arrow envelope's batch as decoded
    # (balancer.core.arrow_envelope.ENVELOPE_SCHEMA) until the flush checks it
    rows: pa.RecordBatch
    first: tuple[int, int]  # (partition, offset) of its first event's record
    # An Arrow envelope's message, and its place among the messages (its rejects, if any,
    # keep their place among the others).
    raw: bytes | None = None
    seq: int = 0


def _is_arrow(chunk: _Chunk) -> bool:
    return chunk.raw is not None


class RecordParser:
    """Parses records into Arrow batches.

    Well-formed JSON messages take the fast path (`streaming.read.fastparse.decode_fast`), kept
    as objects until their run ends; an Arrow envelope (`balancer.core.arrow_envelope`) is kept
    as its columns, checked at the flush (`streaming.read.event_rows.arrow_verdicts`). Any
    other message, or one whose rows a check refuses, is judged by
    `balancer.core.events.parse_message`, which gives the exact reasons.

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
        # Kept events in arrival order: columns, then the current run of JSON events and
        # their topics' full names (columns when the run ends).
        self._chunks: list[_Chunk] = []
        self._run: list[Accepted] = []
        self._run_names: list[str] = []
        self._run_first: tuple[int, int] = (-1, -1)
        self._kept = 0  # events in both (an Arrow envelope's rows until the flush judges them)
        self._rejects: list[tuple[int, Row]] = []  # (message seq, row): arrival order
        self._marks: list[Row] = []

    def __len__(self) -> int:
        return self._kept + len(self._rejects) + len(self._marks)

    def add(self, value: bytes | None, partition: int, offset: int) -> None:
        """Parse one Kafka record value (a single event, a `{"events": [...]}` envelope or an
        Arrow envelope)."""
        self.summary.messages += 1
        raw = b"" if value is None else value
        if is_arrow_envelope(raw):
            self._add_arrow(raw, partition, offset)
            return
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
        first = head[0] if head else None
        # An Arrow envelope is no single event: not worth joining the run to find out.
        events = None if first and is_arrow_envelope(first) else decode_single_events(head)
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
        if not self._run:
            self._run_first = (partition, offset)
        self._run.extend(events)
        self._run_names.extend(full_names)
        self._kept += n
        self.summary.events += n

    def _end_run(self) -> None:
        if self._run:
            rows = json_rows(self._run, self._run_names)
            self._chunks.append(_Chunk(rows, self._run_first))
            self._run, self._run_names = [], []

    def _add_arrow(self, raw: bytes, partition: int, offset: int) -> None:
        """Keep an Arrow envelope's rows as columns (the flush checks them), or reject it whole
        (`parse_message` would give the same single rejection)."""
        batch = decode_envelope(raw)
        if isinstance(batch, Rejection):
            self._reject(raw, batch, partition, offset, None)
            return
        n = batch.num_rows
        if n == 0:
            return
        self._end_run()
        self._chunks.append(_Chunk(batch, (partition, offset), raw, seq=self.summary.messages))
        self._kept += n
        self.summary.events += n

    def _rows(self) -> tuple[pa.Table, tuple[int, int]] | None:
        """The flush's kept events as one table (ROWS_SCHEMA), Arrow envelopes checked, and
        where its first came from; None if none."""
        self._end_run()
        parts: list[pa.Table] = []
        first: tuple[int, int] | None = None
        for is_arrow, group in groupby(self._chunks, key=_is_arrow):
            chunks = list(group)
            if is_arrow:
                table, first_kept = self._arrow_block(chunks)
            else:
                table, first_kept = pa.Table.from_batches([c.rows for c in chunks]), chunks[0].first
            if table.num_rows:
                parts.append(table)
                first = first_kept if first is None else first
        if first is None:
            return None
        rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return rows.combine_chunks(), first

    def _arrow_block(self, chunks: list[_Chunk]) -> tuple[pa.Table, tuple[int, int] | None]:
        """Consecutive Arrow envelopes' rows, checked at once: those of each message whose
        rows all pass, and the accepted events of the others by `parse_message` (their
        rejects with reasons), in order; and the record of the first kept event."""
        table = pa.Table.from_batches([c.rows for c in chunks]).select(ROWS_SCHEMA.names)
        table = table.replace_schema_metadata(None).combine_chunks()
        verdicts = arrow_verdicts(table, latest_ms=self._latest_ms, clusters=self.clusters)
        if verdicts.renamed:  # another spelling of a name: its full name
            table = table.set_column(1, ROWS_SCHEMA.field("topic"), verdicts.topic)
        if verdicts.ok.all():
            return table, chunks[0].first
        pieces: list[pa.Table] = []
        first: tuple[int, int] | None = None
        start = 0
        for chunk in chunks:
            n = chunk.rows.num_rows
            if verdicts.ok[start : start + n].all():
                piece = table.slice(start, n)
            else:
                piece = pa.Table.from_batches([self._judge(chunk)])
            if piece.num_rows:
                pieces.append(piece)
                first = chunk.first if first is None else first
            start += n
        return (pa.concat_tables(pieces) if pieces else table.slice(0, 0)), first

    def _judge(self, chunk: _Chunk) -> pa.RecordBatch:
        """The exact verdicts of an Arrow envelope a check refused: its accepted events."""
        assert chunk.raw is not None
        raw, (partition, offset) = chunk.raw, chunk.first
        results = parse_message(
            raw,
            now_ms=self.now_ms,
            max_future_skew_ms=self.max_future_skew_ms,
            clusters=self.clusters,
        )
        kept: list[TopicStatsEvent] = []
        many = len(results) > 1
        for index, e in enumerate(results):
            if isinstance(e, Rejection):
                self._reject(raw, e, partition, offset, index if many else None, seq=chunk.seq)
                self._kept -= 1
                self.summary.events -= 1
            else:
                kept.append(e)
        return json_rows(kept, [e.topic for e in kept])  # parse_message gives full names

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
        self,
        raw: bytes,
        rejection: Rejection,
        partition: int,
        offset: int,
        index: int | None,
        *,
        seq: int | None = None,
    ) -> None:
        detail = rejection.detail if index is None else f"event {index}: {rejection.detail}"
        kept = raw[:MAX_DEAD_LETTER_RAW_BYTES]
        if len(kept) < len(raw):
            detail += f" (raw bytes truncated to {len(kept)} of {len(raw)})"
        row = _other_row(
            RowKind.REJECT, partition, offset, reason=str(rejection.reason), detail=detail,
            raw=kept,
        )  # fmt: skip
        self._rejects.append((self.summary.messages if seq is None else seq, row))
        self.summary.rejected[str(rejection.reason)] += 1

    def flush(self) -> pa.RecordBatch:
        """The rows parsed since the last flush: the events, then the rejects and marks."""
        events = self._event_batch()
        rejects = [row for _, row in sorted(self._rejects, key=_SEQ)]  # stable: arrival order
        others = _to_batch(rejects + self._marks)
        self._chunks, self._kept = [], 0
        self._rejects, self._marks = [], []
        if others.num_rows == 0:
            return events
        if events.num_rows == 0:
            return others
        return pa.concat_batches([events, others])

    def _event_batch(self) -> pa.RecordBatch:
        """The accepted events as packs: one row per (bucket, pane) (`streaming.shared.packing`)."""
        kept = self._rows()
        if kept is None:
            return _to_batch([])
        rows, first = kept  # a pack spans many records: the flush's first locates it
        n = rows.num_rows
        topics = topic_columns(
            rows.column("topic").chunk(0), self.num_buckets, dedupe=self._dedupe.dedupe()
        )
        if topics.distinct is not None:
            self._dedupe.measured(topics.distinct, n)
        clusters = rows.column("cluster").chunk(0).dictionary_encode()
        columns: dict[str, pa.Array | pa.ChunkedArray] = {
            "cluster": clusters,
            "namespace": topics.namespace,
            "topic": topics.topic,
            "position": pa.array(topics.position),
            "event_ms": rows.column("timestamp_ms"),
        }
        for name, column in _EVENT_COLUMNS.items():
            columns[column] = rows.column(name)
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
            "kafka_partition": pa.array([first[0]] * m, pa.int32()),
            "kafka_offset": pa.array([first[1]] * m, pa.int64()),
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
    "RecordParser",
    "RejectReason",
    "clear_topic_cache",
    "parse_records",
]
