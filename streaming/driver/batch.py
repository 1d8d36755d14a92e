"""The foreachBatch step: closed windows -> bundle snapshots -> `BatchReport` -> handler.

Per micro-batch, in the driver:
1. run the batch (`toArrow` of the closed per-topic windows: this executes the scan, the
   window state update and the observation of side rows);
2. read the batch's observations (per read task summaries and the rejects, gathered by
   `Dataset.observe` in the same pass over the data) and its event-time watermark;
3. write the dead letters; count consumed, rejected by reason, late (by the window rule);
4. roll the newest closed window up to bundles with each namespace's current layout (the
   stage's partials when it had those layouts, else a job of their own);
5. hand the `BatchReport` (with the real batch id) to the handler.

Step 2 reads the batch's `IncrementalExecution` through py4j (`lastExecution`): there is no
public API for a batch's observed metrics inside foreachBatch. It is isolated in
`BatchObservations.of_query`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import pyarrow as pa
import pyarrow.compute as pc

from balancer.core.bundles import NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchHandler, BatchReport, LayoutProvider
from streaming.driver.closed_windows import ClosedWindows, SparkClosedWindows
from streaming.driver.deadletters import DeadLetter, DeadLetterSink
from streaming.driver.rollup import large_topics_of, merge_partials, topic_loads, with_topics
from streaming.read.summary import ReadSummary
from streaming.stage.closing import NEWEST_WINDOW_ONLY_PROPERTY
from streaming.stage.partials import STAGE_LAYOUTS_PROPERTY, TOPIC_ROWS_SCHEMA, StageLayouts
from streaming.stage.windows import WindowSpec, late_events

if TYPE_CHECKING:  # the driver imports pyspark; this module runs without it in tests
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

OBSERVATION_NAME = "pulsar_balancer_side"


@dataclass(frozen=True)
class BatchObservations:
    summaries: tuple[ReadSummary, ...]
    dead_letters: tuple[DeadLetter, ...]
    watermark_ms: int  # eviction watermark of this batch
    late_watermark_ms: int  # watermark Spark drops late rows against in this batch

    @classmethod
    def of_query(cls, query: StreamingQuery) -> BatchObservations:
        """The observations of the batch `query` is running now (call it inside foreachBatch)."""
        execution = query._jsq.streamingQuery().lastExecution()
        metrics = execution.observedMetrics()
        summaries: list[ReadSummary] = []
        letters: list[DeadLetter] = []
        found = metrics.get(OBSERVATION_NAME)
        if found.isDefined():
            row = found.get()
            summaries = [ReadSummary.from_json(str(s)) for s in row.getList(0)]
            letters = [DeadLetter.from_json(str(s)) for s in row.getList(1)]
        watermark_ms = int(execution.offsetSeqMetadata().batchWatermarkMs())
        previous = execution.prevOffsetSeqMetadata()
        late_ms = int(previous.get().batchWatermarkMs()) if previous.isDefined() else watermark_ms
        return cls(tuple(summaries), tuple(letters), watermark_ms, late_ms)


class BatchProcessor:
    """The foreachBatch function. `attach` the query once the stream has started."""

    def __init__(
        self,
        *,
        spec: WindowSpec,
        handler: BatchHandler,
        layouts: LayoutProvider,
        dead_letters: DeadLetterSink,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.spec = spec
        self.handler = handler
        self.layouts = layouts
        self.dead_letters = dead_letters
        self.clock_ms = clock_ms
        self._query: StreamingQuery | None = None
        self._attached = threading.Event()
        self._stage_layouts: StageLayouts | None = None  # those of the last close
        self.partials_jobs = 0  # closes whose partials took a job of their own (not the stage's)

    @property
    def stage_layouts(self) -> StageLayouts | None:
        """The layouts the next batch's stage rolls its closes up with (those of the last
        close; None before one): a replay hands its own windows the same."""
        return self._stage_layouts

    def attach(self, query: StreamingQuery) -> None:
        """The started query, whose batches this processor reads the observations of."""
        self._query = query
        self._attached.set()

    def attached_query(self, timeout_s: float = 60.0) -> StreamingQuery:
        """The query once attached: the first batch may begin before `start()` returns it,
        so its foreachBatch call waits here (up to `timeout_s`)."""
        if not self._attached.wait(timeout=timeout_s) or self._query is None:
            raise RuntimeError("streaming query handle not available")
        return self._query

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        stage = self._stage_layouts
        # Persists the batch: it is read up to 3 times.
        closed = SparkClosedWindows(batch_df, stage_layouts=stage)
        context = batch_df.sparkSession.sparkContext
        try:
            # The stage rolls its closes up with the layouts of the last close (the job that
            # runs the batch carries them); the driver checks they are still in force.
            if stage is not None:
                context.setLocalProperty(STAGE_LAYOUTS_PROPERTY, stage.to_text())
            # The report reads the batch's newest window only: the stage may leave the rows
            # of the closes it supersedes out.
            context.setLocalProperty(NEWEST_WINDOW_ONLY_PROPERTY, "true")
            try:
                closed.heads()  # runs the batch: scan, window state, observations
            finally:
                for name in (STAGE_LAYOUTS_PROPERTY, NEWEST_WINDOW_ONLY_PROPERTY):
                    context.setLocalProperty(name, None)  # None unsets it
            observed = BatchObservations.of_query(self.attached_query())
            report = self.report(batch_id, closed, observed, started)
        finally:
            closed.release()
        self.handler.handle(report)

    def report(
        self, batch_id: int, closed: ClosedWindows, observed: BatchObservations, started: float
    ) -> BatchReport:
        """The report of one batch: `closed` holds every window it closed."""
        self.dead_letters.write(batch_id, observed.dead_letters)
        rejected: Counter[str] = Counter()
        pane_events: Counter[int] = Counter()
        consumed = 0
        lag: dict[int, int] = {}
        for s in observed.summaries:
            rejected.update(s.rejected)
            pane_events.update(s.pane_events)
            consumed += s.consumed
            if s.high_watermark is not None:
                lag[s.partition] = max(0, s.high_watermark - s.next_offset)
        _log_skipped(batch_id, observed.summaries)
        # A pane's start stands for its events: they share their oldest window.
        late = late_events(pane_events, observed.late_watermark_ms, self.spec)
        heads = closed.heads()
        # Windows some topic reported in; only the newest is reported (older ones closed in
        # the same batch are superseded, their topics are known topics of the newest).
        reported = heads.filter(pc.greater(heads.column("topics"), 0))
        ends = reported.column("window_end")
        windows_closed = int(pc.count_distinct(ends).as_py())
        newest_ms = int(pc.max(ends).as_py() or 0) if reported.num_rows else 0
        jobs_before = self.partials_jobs
        bundles, large = self._snapshot(closed, reported, newest_ms)
        now_ms = self.clock_ms()
        delay_s = (now_ms - observed.watermark_ms) / 1000 if observed.watermark_ms > 0 else 0.0
        report = BatchReport(
            batch_id=batch_id,
            window_end_ms=newest_ms,
            bundles=tuple(bundles),
            large_topics=tuple(large),
            events_consumed=consumed,
            events_rejected=dict(rejected),
            events_late=late,
            kafka_lag=lag,
            watermark_delay_s=max(0.0, delay_s),
            duration_s=time.monotonic() - started,
            watermark_ms=observed.watermark_ms,
            windows_closed=windows_closed,
            dead_letters=len(observed.dead_letters),
            spark_s=closed.spark_s,
            newest_event_ms=max((s.newest_event_ms for s in observed.summaries), default=0),
            offsets_skipped=_skipped(observed.summaries),
        )
        if newest_ms:
            _tell_partials_source(
                self.handler, batch_id, from_stage=self.partials_jobs == jobs_before
            )
        return report

    def _snapshot(
        self, closed: ClosedWindows, reported: pa.Table, newest_ms: int
    ) -> tuple[list[BundleLoad], list[tuple[str, TopicLoad]]]:
        """Bundle loads of the newest window: partial sums from the executors, merged here;
        per-topic rows only of the bundles the handler wants and of offload candidates."""
        if not newest_ms:
            return [], []
        newest = reported.filter(pc.equal(reported.column("window_end"), newest_ms))
        pairs = sorted(
            {
                (c, ns)
                for text in newest.column("namespaces").to_pylist()
                for c, ns in json.loads(text)
            }
        )
        layouts: dict[tuple[str, str], NamespaceBundles] = {}
        known: dict[tuple[str, str], int | None] = {}
        for key in pairs:
            try:
                layouts[key] = self.layouts.layout(*key)
                known[key] = self.layouts.known_topics(*key)
            except Exception as exc:  # the admin API may be down: report the others
                log.warning("no bundle layout for %s/%s, skipped: %s", *key, exc)
        threshold = self.handler.offload_min_bytes
        partials = closed.stage_partials(newest_ms, layouts, threshold)
        if partials is None:  # first close, a split, a new namespace: the stage's are stale
            self.partials_jobs += 1
            partials = closed.partials(newest_ms, layouts, threshold)
        self._stage_layouts = StageLayouts(layouts, threshold)
        bundles = merge_partials(partials, window_end_ms=newest_ms, namespace_known=known)
        wanted = [
            (b.cluster, b.namespace, b.bundle.lower)
            for b in bundles
            if self.handler.wants_topics(b)
        ]
        # A third read only when a bundle is near a limit: offload candidates came with the
        # partials.
        wanted_rows = (
            closed.topic_rows(newest_ms, layouts, wanted=wanted, min_storage_bytes=None)
            if wanted
            else TOPIC_ROWS_SCHEMA.empty_table()
        )
        loads = topic_loads(wanted_rows, large_topics_of(partials))
        # Every topic at least the threshold came with the partials: the large ones are those.
        large = (
            []
            if threshold is None
            else [(c, load) for c, _, load in loads if load.storage_size >= threshold]
        )
        return with_topics(bundles, loads, layouts, wanted), large


def _skipped(summaries: Sequence[ReadSummary]) -> dict[str, int]:
    """Offsets the read tasks skipped, by why (the `BatchReport.offsets_skipped` keys)."""
    counts = {
        "partition_gone": sum(s.skipped_offsets for s in summaries if s.vanished),
        "records_lost": sum(s.skipped_offsets for s in summaries if not s.vanished),
    }
    return {why: n for why, n in counts.items() if n}


def _log_skipped(batch_id: int, summaries: Sequence[ReadSummary]) -> None:
    """Say which Kafka offsets the batch could not read, and why (the read tasks count them)."""
    gone = sorted({s.partition for s in summaries if s.vanished})
    if gone:
        log.warning(
            "batch %d: Kafka partition(s) %s no longer exist (the topic was recreated with "
            "fewer partitions): not read any more, %d of the batch's planned offsets skipped",
            batch_id,
            gone,
            sum(s.skipped_offsets for s in summaries if s.vanished),
        )
    lost = {
        s.partition: s.skipped_offsets for s in summaries if s.skipped_offsets and not s.vanished
    }
    if lost:
        log.warning(
            "batch %d: %d Kafka offsets skipped, the broker no longer has them (by partition: %s)",
            batch_id,
            sum(lost.values()),
            lost,
        )


@runtime_checkable
class PartialsSourceObserver(Protocol):
    """A handler that also wants to know, per batch that closed a window, whether its bundle
    partials came with the window stage's closes (no Spark job of their own) or from the
    driver's partials job: the benchmarks and tests measure the stage partials with it
    (docs/decisions.md#stage-partials). The core's `BatchHandler` knows nothing of it."""

    def partials_source(self, batch_id: int, *, from_stage: bool) -> None: ...


def _tell_partials_source(handler: object, batch_id: int, *, from_stage: bool) -> None:
    if isinstance(handler, PartialsSourceObserver):
        handler.partials_source(batch_id, from_stage=from_stage)
