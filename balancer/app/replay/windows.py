"""A recording's stats messages through the stream's own code, in batch: closed windows.

`run` reads the stats topic with the Kafka source, parses every record in its read tasks
(`streaming.read.parse`), keeps each PIP-157 bucket's open windows in the stateful stage
(`streaming.stage.windows.topic_windows`) and, in foreachBatch, reads what closed. The
replay runs the same plan with one change of source and one of sink:

- **source**: the recorded messages are written, in their order, to Parquet files of raw
  rows `(partition, offset, value)` (`batch_files.write_batches`), one file per micro-batch,
  by a thread, and read back as a file stream with `Trigger.AvailableNow` and
  `maxFilesPerTrigger` 1 while the rest are written (`_Runs`: chained runs); the rows are
  parsed by the native path's `mapInArrow` over `parse_records` (the read task's rules,
  `streaming.spark.job.parse_raw`'s code) and the side rows observed as `run` observes them;
- **sink**: every window a batch closes is read whole (every bucket's close, every part:
  the per-topic rows and the known topics), not only the newest window's near-limit rows
  `run` asks for, and handed to the caller one window at a time, oldest first.

Windows close exactly as `run` closes them: the stage is the same, so a round marker moves
the watermark to its `until_ms` and the window closes in the batch after the one that read
it; without markers the watermark's lateness closes it. A micro-batch file ends after each
round marker (the batch `run` reads when the collector keeps up: a round and its marker),
or at `records_per_batch` records (`markers_per_batch` joins rounds for speed). Memory is
bounded by the windows of a batch, not the recording: foreachBatch reads a batch's closed
rows once (packed, a few payloads per bucket and window) and the queue to the caller holds
`queued_windows` of them; the caller decodes one window at a time; the stage's state is on
disk (RocksDB). Spark in batch needs the files on
disk: a replay costs at most the recording's size in Parquet under its work directory
while it runs (a run's files are deleted when it ends; docs/operations.md#replay).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from balancer.app.replay.batch_files import (
    RAW_FILE_SCHEMA,
    BatchFile,
    BatchFiles,
    BatchWriter,
    publish,
)
from balancer.core.load import TopicLoad
from balancer.core.replay.recording import RecordedMessage
from streaming.driver.batch import BatchObservations
from streaming.driver.rollup import sorted_topic_rows, topic_loads
from streaming.read.parse import parse_records
from streaming.shared.packing import decode_windows
from streaming.shared.schema import CLOSED_ARROW_SCHEMA, PARSED_SPARK_SCHEMA
from streaming.spark.job import ArrowMap, observe_side_rows
from streaming.stage.partials import STAGE_LAYOUTS_PROPERTY, TOPIC_ROWS_SCHEMA, StageLayouts
from streaming.stage.windows import WindowSpec, late_events, topic_windows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

DEFAULT_RECORDS_PER_BATCH = 20_000
# Spark's vectorized Parquet reader reserves a batch of rows of a column at once
# (`spark.sql.parquet.columnarReaderBatchSize`, 4,096 rows): 4,096 envelopes of 40 KiB
# already ask for 170 MB contiguous and failed a 100,000-topic replay of 15 rounds a batch
# (OutOfMemoryError). Its rows are set so that a batch of the largest value stays under this.
READER_BATCH_BYTES = 32 << 20
SPARK_READER_BATCH_ROWS = 4096


def reader_batch_rows(max_value_bytes: int) -> int:
    """Rows a Parquet reader batch may hold: at most READER_BATCH_BYTES of the largest value."""
    return max(1, min(SPARK_READER_BATCH_ROWS, READER_BATCH_BYTES // max(1, max_value_bytes)))


@dataclass(frozen=True, kw_only=True)
class WindowSettings:
    """The stream settings a replay windows with: `run`'s (`StreamSettings`' window fields)."""

    window_s: int
    slide_s: int
    watermark_s: int
    num_buckets: int
    shuffle_partitions: int
    max_future_skew_s: int
    clusters: tuple[str, ...] = ()
    records_per_batch: int = DEFAULT_RECORDS_PER_BATCH
    # Rounds (markers) per micro-batch: 1 is the batch `run` reads when it keeps up. More
    # make fewer batches (each costs Spark a fixed time) and close the same windows with
    # the same contents when every round ends with a marker (an event is late only against
    # an earlier batch's watermark, and a round's events come before its marker).
    markers_per_batch: int = 1
    # Closed windows handed over ahead of the policies (each its packed closed rows, not
    # its decoded topics): as many as a batch closes let Spark run the next micro-batch
    # while the policies work through this one's windows (the same windows, in order).
    queued_windows: int = 1
    # Files the first query run waits for (the stream starts while the rest are written):
    # 1 gives the first window soonest; more than the recording has: one run over them all.
    first_run_files: int = 1

    @property
    def spec(self) -> WindowSpec:
        return WindowSpec(self.window_s, self.slide_s, self.watermark_s)


@dataclass(frozen=True)
class ClosedWindow:
    """One closed event-time window, every bucket's close of it (CLOSED_ARROW_SCHEMA rows,
    the rows `run`'s foreachBatch reads), with its per-topic loads on demand (decoded once:
    the engine and every policy read the same list)."""

    end_ms: int
    rows: pa.Table
    # The layouts the stage rolled this window's closes up with (their `partials` column),
    # as `run`'s stage rolls them up with its driver's layouts; None: the stage had none.
    stage_layouts: StageLayouts | None = None
    # The micro-batch that closed it (-1: none): the stage rolls up only the newest close
    # with topics of a batch (`streaming.stage.closing.BucketCloses`), the one `run` reads.
    batch_id: int = -1
    _table: pa.Table | None = field(default=None, init=False, repr=False, compare=False)
    _rows: pa.Table | None = field(default=None, init=False, repr=False, compare=False)
    _loads: list[tuple[str, str, TopicLoad]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def topics(self) -> int:
        """Topics that reported in the window (0: only the known topics' fill-in closes)."""
        return int(pc.sum(self.rows.column("topics")).as_py() or 0)

    def topic_table(self) -> pa.Table:
        """The window's per-topic rows (TOPIC_ROWS_SCHEMA), all buckets (decoded once)."""
        if self._table is None:
            payloads = [p for p in self.rows.column("payload").to_pylist() if p is not None]
            table = (
                decode_windows(payloads).select(TOPIC_ROWS_SCHEMA.names).cast(TOPIC_ROWS_SCHEMA)
                if payloads
                else TOPIC_ROWS_SCHEMA.empty_table()
            )
            object.__setattr__(self, "_table", table)
        assert self._table is not None
        return self._table

    def topic_rows(self) -> pa.Table:
        """Every topic that reported, once (TOPIC_ROWS_SCHEMA columns), sorted by (cluster,
        namespace, position, topic): what the Pulsar policies' columnar window is built from
        (sorted once)."""
        if self._rows is None:
            table = self.topic_table()
            object.__setattr__(self, "_rows", sorted_topic_rows(table) if table.num_rows else table)
        assert self._rows is not None
        return self._rows

    def topic_loads(self) -> list[tuple[str, str, TopicLoad]]:
        """(cluster, namespace, load) of every topic that reported, in (cluster, namespace,
        position, topic) order: the rows `run` hands its handler, for every bundle (a
        `TopicLoad` each: the replay's policies read `topic_rows` instead). The same list on
        every call (do not change it)."""
        if self._loads is None:
            rows = self.topic_rows()
            object.__setattr__(self, "_loads", topic_loads(rows) if rows.num_rows else [])
        assert self._loads is not None
        return self._loads


@dataclass
class StreamCounts:
    """What the stream read, as `run`'s batch reports count it."""

    messages: int = 0
    samples: int = 0  # valid topic samples
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> samples
    late: int = 0
    marks: int = 0
    batches: int = 0
    write_s: float = 0.0  # writing the micro-batch files (reading the recording included)
    write_cpu_s: float = 0.0  # of it, the writer thread's CPU
    files: int = 0  # micro-batch files written
    runs: int = 0  # query runs (chained AvailableNow runs on one checkpoint)


MIN_SPLIT_BYTES = 256 << 10


def split_bytes(files: BatchFiles, cores: int) -> int:
    """The reader's split: the largest batch file in a split a core (a few bytes over, so
    that rounding never makes one split more), not under MIN_SPLIT_BYTES."""
    return max(MIN_SPLIT_BYTES, -(-files.max_file_bytes // max(1, cores)) + 1)


def _parse(settings: WindowSettings) -> ArrowMap:
    """The native path's parse (`streaming.spark.job.parse_raw`), on the record's clock."""
    num_buckets, slide_ms = settings.num_buckets, settings.slide_s * 1000
    skew_ms = settings.max_future_skew_s * 1000
    known = frozenset(settings.clusters) or None

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            stamps = batch.column("timestamp_ms")
            now_ms = int(pc.max(stamps).as_py() or 0) if len(stamps) else None
            yield from parse_records(
                batch.column("value").to_pylist(), batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(), num_buckets=num_buckets, slide_ms=slide_ms,
                now_ms=now_ms or None, max_future_skew_ms=skew_ms, clusters=known,
            )  # fmt: skip

    return parse


def build_replay_pipeline(spark: SparkSession, files: Path, settings: WindowSettings) -> DataFrame:
    """The stream's plan over the micro-batch files: parse, observe, windows."""
    from pyspark.sql.pandas.types import from_arrow_schema

    raw = (
        spark.readStream.schema(from_arrow_schema(RAW_FILE_SCHEMA))
        .option("maxFilesPerTrigger", 1)
        .parquet(str(files))
    )
    parsed = observe_side_rows(raw.mapInArrow(_parse(settings), PARSED_SPARK_SCHEMA))
    return topic_windows(
        parsed,
        settings.spec,
        num_buckets=settings.num_buckets,
        shuffle_partitions=settings.shuffle_partitions,
    )


_DONE = object()


# The layouts a policy would have the stage roll its closes up with (`OursPolicy`'s: those
# of its last handled window), asked for as each micro-batch starts.
StageLayoutsOf = Callable[[], StageLayouts | None]


class _Handoff:
    """foreachBatch: each closed window of the batch, oldest first, into a queue of
    `queued_windows` (the engine takes them from it)."""

    def __init__(
        self, settings: WindowSettings, counts: StreamCounts, stage_layouts: StageLayoutsOf
    ) -> None:
        self.spec = settings.spec
        self.counts = counts
        self.stage_layouts = stage_layouts
        self.out: queue.Queue[object] = queue.Queue(maxsize=max(1, settings.queued_windows))
        self.query: StreamingQuery | None = None
        self.stopping = threading.Event()
        self.attached = threading.Event()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        # As `run`'s driver does (`streaming.driver.batch.BatchProcessor`): the stage rolls
        # its closes up with the layouts of the last window handled, so `ours` reads its
        # bundle partials from the closes while they are still in force, not computing them
        # itself (the same partials: `ClosedWindows.stage_partials` checks they are).
        stage = self.stage_layouts()
        context = batch_df.sparkSession.sparkContext
        if stage is not None:
            context.setLocalProperty(STAGE_LAYOUTS_PROPERTY, stage.to_text())
        try:
            # One read of the batch's closed rows (packed: a window's topics are a few
            # payloads per bucket), which runs the batch; split by window here.
            closed = batch_df.select(*CLOSED_ARROW_SCHEMA.names).toArrow()
        finally:
            context.setLocalProperty(STAGE_LAYOUTS_PROPERTY, None)  # None unsets it
        if not self.attached.wait(timeout=60) or self.query is None:
            raise RuntimeError("replay query handle not available")
        self._count(BatchObservations.of_query(self.query))
        # Oldest window first, each a zero-copy slice of the batch's rows (a stable sort: a
        # window's rows keep their order), so the queue holds no second copy of them.
        closed = closed.sort_by("window_end")
        start = 0
        for end_ms, rows in groupby(closed.column("window_end").to_pylist()):
            count = sum(1 for _ in rows)
            window = closed.slice(start, count)
            start += count
            self._put(ClosedWindow(int(end_ms), window, stage_layouts=stage, batch_id=batch_id))

    def _count(self, observed: BatchObservations) -> None:
        pane_events: Counter[int] = Counter()
        for summary in observed.summaries:
            self.counts.messages += summary.messages
            self.counts.samples += summary.events
            self.counts.marks += summary.marks
            self.counts.rejected.update(summary.rejected)
            pane_events.update(summary.pane_events)
        self.counts.late += late_events(pane_events, observed.late_watermark_ms, self.spec)
        self.counts.batches += 1

    def _put(self, item: object) -> None:
        while not self.stopping.is_set():
            try:
                self.out.put(item, timeout=0.5)
                return
            except queue.Full:
                continue


class _Runs:
    """Chained `Trigger.AvailableNow` runs of the replay's query on one checkpoint, each over
    the files written since the last began (AvailableNow reads only the files listed at
    its start), while the writer writes the rest: the stream starts after the first file,
    not after the recording's last. A run is sized for exactly the files published for it;
    the next waits for at least twice as many (restarts stay a few: each costs a query
    start and the state's load) unless the writer is done. A run's files are deleted once
    it ends (its batches are committed: a restart on the checkpoint never reads them)."""

    def __init__(
        self, spark: SparkSession, settings: WindowSettings, workdir: Path, handoff: _Handoff
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.workdir = workdir
        self.handoff = handoff
        self.runs = 0
        self._lock = threading.Lock()
        self._stopped = False
        self._query: StreamingQuery | None = None

    def drive(self, writer: BatchWriter) -> None:
        """Run the query over every file the writer writes, a run at a time."""
        min_files = max(1, self.settings.first_run_files)
        while True:
            files = writer.take(min_files)
            if not files:
                return
            self._run(files)
            min_files = 2 * len(files)

    def _run(self, files: list[BatchFile]) -> None:
        spark, handoff = self.spark, self.handoff
        with self._lock:
            if self._stopped:
                return
            sizes = publish(files)
            self._size_reader(sizes)
            # The handle the batches' observations are read from: this run's, set before
            # its first batch reads it.
            handoff.attached.clear()
            query = (
                build_replay_pipeline(spark, self.workdir / "batches", self.settings)
                .writeStream.outputMode("append")
                .foreachBatch(handoff)
                .option("checkpointLocation", str(self.workdir / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            self._query = handoff.query = query
            handoff.attached.set()
            self.runs += 1
        log.info("replay: query run %d over %d file(s)", self.runs, sizes.files)
        query.awaitTermination()
        with self._lock:
            if self._stopped:
                return
        for file in files:
            file.published_path.unlink(missing_ok=True)

    def _size_reader(self, files: BatchFiles) -> None:
        # Before the query starts: a streaming query runs on a copy of the session's conf.
        self.spark.conf.set(
            "spark.sql.parquet.columnarReaderBatchSize",
            str(reader_batch_rows(files.max_value_bytes)),
        )
        # A batch's file in as many splits as Spark has cores: Spark splits a file at
        # 128 MiB (or its size over the cores, but not under 4 MiB), so a batch's file of a
        # few MiB was read and parsed by one task while the other cores waited.
        cores = self.spark.sparkContext.defaultParallelism
        self.spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes(files, cores)))

    def stop(self) -> None:
        """No further run; the current one stopped (the caller closed, or the writer failed)."""
        with self._lock:
            self._stopped = True
            query = self._query
        if query is not None and query.isActive:
            query.stop()


def stream_windows(
    spark: SparkSession,
    messages: Iterable[RecordedMessage],
    settings: WindowSettings,
    workdir: Path,
    counts: StreamCounts | None = None,
    stage_layouts: StageLayoutsOf | None = None,
) -> Iterator[ClosedWindow]:
    """Every window the stream closes over `messages`, oldest first, as `run` closes them.

    `workdir` holds the micro-batch files and the checkpoint (empty it after). `counts`
    is filled as batches run (samples, rejects by reason, late samples). `stage_layouts`:
    the layouts the stage rolls each batch's closes up with (None: none). A failure of
    the recording's read or of the files' writing stops the query and is raised here."""
    counts = counts if counts is not None else StreamCounts()
    handoff = _Handoff(settings, counts, stage_layouts or (lambda: None))
    runs = _Runs(spark, settings, workdir, handoff)
    writer = BatchWriter(
        messages, workdir / "batches", records_per_batch=settings.records_per_batch,
        markers_per_batch=settings.markers_per_batch, on_failure=runs.stop,
    )  # fmt: skip
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            runs.drive(writer)
        except BaseException as exc:  # the query's failure, raised to the caller below
            failure.append(exc)
        handoff._put(_DONE)

    writer.start()
    driver = threading.Thread(target=drive, name="replay-windows", daemon=True)
    driver.start()
    try:
        while True:
            item = handoff.out.get()
            if item is _DONE:
                break
            assert isinstance(item, ClosedWindow)
            yield item
    finally:
        handoff.stopping.set()
        runs.stop()
        writer.stop()
        driver.join(timeout=60)
        counts.write_s, counts.write_cpu_s = writer.write_s, writer.write_cpu_s
        counts.files, counts.runs = writer.files, runs.runs
        log.info(
            "replay: %d micro-batch file(s) in %.1f s, %d query run(s)",
            writer.files, writer.write_s, runs.runs,
        )  # fmt: skip
    # The writer's failure first: the query it stopped may have failed of it.
    if writer.failure is not None:
        raise writer.failure
    if failure:
        raise failure[0]
