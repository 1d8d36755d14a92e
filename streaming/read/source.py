"""A Spark streaming source reading Kafka (PySpark's Python Data Source API).

Spark's own Kafka connector is not available everywhere, so this source reads a topic itself:
kafka-python on the driver (offsets; `streaming.read.kafka_offsets`), confluent-kafka in the read
tasks (records; see `streaming.read.partition_range` for why). Design:
- Offsets are a JSON dict `{"<partition>": next_offset}` kept by Spark in the checkpoint, so a
  restart after a stop or a crash resumes exactly where the last committed batch ended.
- No consumer group: each read task assigns its partition at its start offset.
- The end of a partition is the high-water mark from *fetch* responses: some brokers (tansu)
  answer ListOffsets "latest" wrongly, the fetch high-water mark is always right.
- By default rows are parsed and validated in the read task itself with the domain core's
  validator (`streaming.read.parse`), so Spark gets packs (one row per bucket and pane, its
  valid events as an Arrow payload), rejects become rows for the dead-letter sink, and one
  bad record never fails a batch. Option `raw=true` yields the records as (partition,
  offset, value) instead, the layout of Spark's native `kafka` source.
- Rows are yielded as Arrow record batches (several times faster than tuples).

Options (keys arrive lower-cased): bootstrap_servers, topic, num_buckets, pane_ms and
max_future_skew_ms (required: the stream's settings), starting_offsets (earliest|latest),
max_offsets_per_trigger, raw, batch_rows, poll_timeout_ms, read_timeout_s, clusters (a JSON
list), and the
`KafkaSecurity` keys (security_protocol, sasl_mechanism, sasl_username, sasl_password_env,
ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password_env).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from balancer.kafka.clients import close_consumer
from balancer.kafka.security import KafkaSecurity
from streaming.read.kafka_offsets import fetch_high_watermarks, split_limit, topic_partitions
from streaming.read.parse import RecordParser
from streaming.read.partition_range import PartitionRange, consumer_config
from streaming.read.summary import ReadSummary
from streaming.shared.schema import PARSED_SPARK_SCHEMA, RAW_ARROW_SCHEMA, RAW_SPARK_SCHEMA

if TYPE_CHECKING:  # kafka-python is imported where a consumer is made
    from kafka import KafkaConsumer
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SOURCE_NAME = "pulsar_stats_kafka"

Offsets = dict[str, int]  # partition (as text: JSON keys) -> next offset to read


class SourceOptionError(ValueError):
    """A data source option that cannot work."""


# Events a read task parses per flush (one Arrow batch of packs). A pack is one flush's
# events of a (bucket, pane): with 20,000 a backlog spanning many panes gave packs of ~600
# events, whose fixed cost to encode and decode (~0.9 ms a pack) took ~16 % of the
# workers' time (docs/decisions.md#flushes-of-100000-events). A flush holds its events as
# objects until then.
DEFAULT_BATCH_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap_servers: str
    topic: str
    # The stream's settings (`streaming.spark.job.StreamSettings.source_options`), without defaults
    # here: the config's are the only ones (tests/app/test_stream_defaults.py).
    num_buckets: int = field(kw_only=True)
    pane_ms: int = field(kw_only=True)  # events are packed per (bucket, pane): the window slide
    max_offsets_per_trigger: int | None = field(kw_only=True)  # None: no limit
    # The reader's rules (docs/events.md): events stamped further ahead of the task's wall
    # clock, or of a cluster outside `clusters` (when not empty), are dead-lettered.
    max_future_skew_ms: int = field(kw_only=True)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    raw: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    poll_timeout_ms: int = 500
    read_timeout_s: float = 60.0  # a read task fails after this long without a record
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    clusters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.bootstrap_servers or not self.topic:
            raise SourceOptionError("options bootstrap_servers and topic are required")
        if self.starting_offsets not in ("earliest", "latest"):
            raise SourceOptionError(
                f"starting_offsets must be 'earliest' or 'latest', got {self.starting_offsets!r}"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise SourceOptionError("max_offsets_per_trigger must be >= 1")
        if self.num_buckets < 1:
            raise SourceOptionError("num_buckets must be >= 1")
        if self.pane_ms < 1:
            raise SourceOptionError("pane_ms must be >= 1")
        if self.max_future_skew_ms < 1:
            raise SourceOptionError("max_future_skew_ms must be >= 1")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}

        def get_int(key: str, default: int | None) -> int | None:
            text = opts.get(key)
            if text in (None, ""):
                return default
            try:
                return int(str(text))
            except ValueError:
                raise SourceOptionError(f"option {key} must be an integer, got {text!r}") from None

        # Absent or empty (or 0): the dataclass's default, the one place each is written.
        defaults: dict[str, Any] = {f.name: f.default for f in fields(cls)}

        def get_int_or_default(key: str) -> int:
            return get_int(key, None) or defaults[key]

        def get_required_int(key: str) -> int:
            value = get_int(key, None)
            if value is None:  # the stream's settings always give it (`to_options`)
                raise SourceOptionError(f"option {key} is required")
            return value

        starting = opts.get("starting_offsets", opts.get("startingoffsets", "earliest"))
        return cls(
            bootstrap_servers=opts.get("bootstrap_servers", ""),
            topic=opts.get("topic", ""),
            starting_offsets=starting,  # type: ignore[arg-type]  # checked in __post_init__
            max_offsets_per_trigger=get_int("max_offsets_per_trigger", None),
            raw=opts.get("raw", "false").lower() == "true",
            num_buckets=get_required_int("num_buckets"),
            pane_ms=get_required_int("pane_ms"),
            batch_rows=get_int_or_default("batch_rows"),
            poll_timeout_ms=get_int_or_default("poll_timeout_ms"),
            read_timeout_s=float(opts.get("read_timeout_s", defaults["read_timeout_s"])),
            security=KafkaSecurity.from_options(opts),
            max_future_skew_ms=get_required_int("max_future_skew_ms"),
            clusters=tuple(json.loads(opts.get("clusters") or "[]")),
        )

    def to_options(self) -> dict[str, str]:
        out = {
            "bootstrap_servers": self.bootstrap_servers,
            "topic": self.topic,
            "starting_offsets": self.starting_offsets,
            "raw": str(self.raw).lower(),
            "num_buckets": str(self.num_buckets),
            "pane_ms": str(self.pane_ms),
            "batch_rows": str(self.batch_rows),
            "poll_timeout_ms": str(self.poll_timeout_ms),
            "read_timeout_s": str(self.read_timeout_s),
            "max_future_skew_ms": str(self.max_future_skew_ms),
            "clusters": json.dumps(list(self.clusters)),
            **self.security.to_options(),
        }
        if self.max_offsets_per_trigger is not None:
            out["max_offsets_per_trigger"] = str(self.max_offsets_per_trigger)
        return out

    def consumer(self, **overrides: Any) -> KafkaConsumer:
        """A kafka-python consumer without a group (offsets live in Spark's checkpoint)."""
        from kafka import KafkaConsumer

        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "group_id": None,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "client_id": "pulsar-balancer-stream",
            **self.security.client_kwargs(),
            **overrides,
        }
        return KafkaConsumer(**kwargs)

    def range_config(self) -> dict[str, str | int | bool]:
        """librdkafka properties of a read task's consumer (passwords read now, in the task)."""
        return consumer_config(self.bootstrap_servers, self.security.librdkafka_config())


@dataclass(frozen=True)
class KafkaRange(InputPartition):  # type: ignore[misc]  # pyspark is untyped here
    """One read task: offsets [start, end) of one partition.

    `vanished`: the topic no longer has the partition (recreated with fewer partitions); the
    task reads nothing and reports the range as skipped, and the partition as gone.
    """

    partition: int
    start: int
    end: int
    vanished: bool = False


# pyspark is untyped here
class KafkaStatsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Driver side only; dropped when the reader is pickled.
        self._consumer: KafkaConsumer | None = None
        self._known: dict[int, int] = {}  # last high-water marks seen
        self._partitions: set[int] = set()  # the topic's partitions when last looked at
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow end

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    def _marks(self, start: Mapping[int, int]) -> dict[int, int]:
        if self._consumer is None:
            self._consumer = self.options.consumer(max_partition_fetch_bytes=1024)
        positions = {p: max(start.get(p, 0), self._known.get(p, 0)) for p in self._known}
        for p, offset in start.items():
            positions.setdefault(p, offset)
        marks = fetch_high_watermarks(self._consumer, self.options.topic, positions)
        self._known.update(marks)
        if marks:
            self._partitions = set(marks)
        return marks

    def _existing(self, named: set[int]) -> set[int]:
        """The topic's partitions, looked up again when `named` holds one not seen last time
        (empty when the topic does not exist: then nothing is taken as gone)."""
        if named <= self._partitions:
            return self._partitions
        if self._consumer is None:
            self._consumer = self.options.consumer(max_partition_fetch_bytes=1024)
        found = topic_partitions(self._consumer, self.options.topic, refresh=True)
        if found:
            self._partitions = found
        return found

    def initialOffset(self) -> dict[str, int]:
        if self.options.starting_offsets == "latest":
            marks = self._marks({})
            return {str(p): m for p, m in sorted(marks.items())}
        parts = self._marks({})
        return dict.fromkeys((str(p) for p in sorted(parts)), 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._marks({})

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = {int(p): int(o) for p, o in start.items()}
        marks = self._target if self._target is not None else self._marks(begin)
        # A partition that ends before the checkpoint's offset lost its data (the topic was
        # recreated, or the broker came back empty): read it again from offset 0. The batch
        # that notices ends that partition at 0, so the next batch reads the new records,
        # instead of waiting, blind, until the new offsets pass the old ones.
        lost = sorted(p for p, m in marks.items() if m < begin.get(p, 0))
        if lost:
            log.warning(
                "Kafka topic %s: partition(s) %s end before the checkpoint's offsets (data "
                "lost or topic recreated): reading them again from offset 0",
                self.options.topic,
                lost,
            )
        # A partition that appeared after the start is read from its beginning.
        available = {p: 0 if p in lost else max(m, begin.get(p, 0)) for p, m in marks.items()}
        if marks:
            # A partition of the checkpoint that the topic no longer has (it was recreated
            # with fewer partitions) is dropped from the offsets: should it come back, it is
            # a new partition, read from offset 0. `partitions` reports it in this batch.
            gone = sorted(p for p in begin if p not in marks)
            if gone:
                log.warning(
                    "Kafka topic %s no longer has partition(s) %s of the checkpoint's offsets "
                    "(recreated with fewer partitions): dropped from the offsets",
                    self.options.topic,
                    gone,
                )
        else:
            available = dict(begin)  # the topic is not there (yet): keep the offsets
        if isinstance(limit, ReadMaxRows):
            end = split_limit(begin, available, limit.max_rows)
            end.update(dict.fromkeys(lost, 0))
        else:
            end = available
        return {str(p): o for p, o in sorted(end.items())}

    def reportLatestOffset(self) -> dict[str, int] | None:
        return {str(p): o for p, o in sorted(self._known.items())} or None

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[KafkaRange]:
        """A read task per partition with records in [start, end), and one per partition
        the topic no longer has (`KafkaRange.vanished`): one whose planned range can never
        be read (a batch planned before the topic was recreated with fewer partitions and
        replayed after), or one that `latestOffset` dropped from the offsets."""
        first = {int(p): int(o) for p, o in start.items()}
        last = {int(p): int(o) for p, o in end.items()}
        existing = self._existing(set(first) | set(last))
        gone = set(first) | set(last) if existing else set()
        gone -= existing
        out = []
        for p in sorted(set(first) | set(last)):
            begin = first.get(p, 0)
            stop = last.get(p, begin)
            if p in gone and (p not in last or stop > begin):
                out.append(KafkaRange(p, begin, stop, vanished=True))
            elif p not in gone and stop > begin:
                out.append(KafkaRange(p, begin, stop))
        if gone:
            log.warning(
                "Kafka topic %s no longer has partition(s) %s: their offsets are skipped",
                self.options.topic,
                sorted(gone),
            )
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        if self.options.raw:
            yield from _read_raw(self.options, partition)
        else:
            yield from _read_parsed(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Offsets live in Spark's checkpoint; nothing to commit to Kafka."""

    def stop(self) -> None:
        if self._consumer is not None:
            close_consumer(self._consumer)
            self._consumer = None


def _range(options: SourceOptions, task: KafkaRange) -> PartitionRange:
    return PartitionRange(
        options.range_config(),
        options.topic,
        task.partition,
        task.start,
        task.end,
        poll_timeout_s=options.poll_timeout_ms / 1000,
        read_timeout_s=options.read_timeout_s,
    )


def _read_parsed(options: SourceOptions, task: KafkaRange) -> Iterator[pa.RecordBatch]:
    summary = ReadSummary(task.partition, task.start, task.end)
    parser = RecordParser(
        num_buckets=options.num_buckets,
        slide_ms=options.pane_ms,
        summary=summary,
        # The edge reads the clock once per task; the parser itself is pure.
        now_ms=int(time.time() * 1000),
        max_future_skew_ms=options.max_future_skew_ms,
        clusters=frozenset(options.clusters) or None,
    )
    if task.vanished:  # nothing to read: the summary says so
        summary.next_offset, summary.vanished = task.start, True
        summary.skipped_offsets = task.end - task.start
    else:
        yield from _parse_range(options, task, parser)
    if len(parser):
        yield parser.flush()
    yield parser.summary_batch()


def _parse_range(
    options: SourceOptions, task: KafkaRange, parser: RecordParser
) -> Iterator[pa.RecordBatch]:
    """Parse the task's records, yielding a batch each `batch_rows` rows (the rest stays in
    `parser`); the range's end state goes into the parser's summary."""
    partition, batch_rows, summary = task.partition, options.batch_rows, parser.summary
    with _range(options, task) as records:
        for batch in records.batches():
            values = [m.value() for m in batch]
            # A consumed record always has an offset (confluent-kafka types it optional).
            offsets: list[int] = [m.offset() for m in batch]  # type: ignore[misc]
            while values:
                taken = parser.add_run(values, partition, offsets, limit=batch_rows)
                if len(parser) >= batch_rows:
                    yield parser.flush()
                values, offsets = values[taken:], offsets[taken:]
        summary.high_watermark = records.high_watermark
        summary.skipped_offsets, summary.vanished = records.lost_offsets, records.vanished


def _read_raw(options: SourceOptions, task: KafkaRange) -> Iterator[pa.RecordBatch]:
    if task.vanished:
        return  # raw rows carry no summary: the driver's log says which partitions are gone
    offsets: list[int] = []
    values: list[bytes | None] = []
    with _range(options, task) as records:
        for batch in records.batches():
            # A consumed record always has an offset (confluent-kafka types it optional).
            offsets.extend(m.offset() for m in batch)  # type: ignore[misc]
            values.extend(m.value() for m in batch)
            while len(offsets) >= options.batch_rows:
                n = options.batch_rows
                yield _raw_batch(task.partition, offsets[:n], values[:n])
                offsets, values = offsets[n:], values[n:]
    if offsets:
        yield _raw_batch(task.partition, offsets, values)


def _raw_batch(partition: int, offsets: list[int], values: list[bytes | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"partition": [partition] * len(offsets), "offset": offsets, "value": values},
        schema=RAW_ARROW_SCHEMA,
    )


class KafkaStatsSource(DataSource):  # type: ignore[misc]  # pyspark is untyped here
    """`spark.readStream.format("pulsar_stats_kafka")`; register with `register_source`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        raw = str(self.options.get("raw", "false")).lower() == "true"
        return RAW_SPARK_SCHEMA if raw else PARSED_SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStatsStreamReader:
        return KafkaStatsStreamReader(SourceOptions.from_options(self.options))


def register_source(spark: SparkSession) -> None:
    spark.dataSource.register(KafkaStatsSource)
