"""The foreachBatch step: closed windows -> bundle snapshots -> `BatchReport` -> handler.

Per micro-batch, in the driver:
1. run the batch (`toArrow` of the closed per-topic windows: this executes the scan, the
   window state update and the observation of side rows);
2. read the batch's observations (per read task summaries and the rejects, gathered by
   `Dataset.observe` in the same pass over the data) and its event-time watermark;
3. write the dead letters; count consumed, rejected by reason, late (by the window rule);
4. roll the newest closed window up to bundles with each namespace's current layout;
5. hand the `BatchReport` (with the real batch id) to the handler.

Step 2 reads the batch's `IncrementalExecution` through py4j (`lastExecution`): there is no
public API for a batch's observed metrics inside foreachBatch. It is isolated in
`BatchObservations.of_query`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from balancer.core.bundles import NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchHandler, BatchReport, LayoutProvider
from balancer.core.topics import parse_topic
from streaming.deadletters import DeadLetter, DeadLetterSink
from streaming.packing import decode_windows
from streaming.parse import ReadSummary
from streaming.rollup import TOPIC_COLUMNS, KnownTopics, NewestWindow, roll_up_newest
from streaming.rollup_reference import TopicWindow
from streaming.schema import RATE_COLUMNS
from streaming.windows import WindowSpec, late_events

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


def windows_table(windows: Sequence[TopicWindow]) -> pa.Table:
    """Closed-window rows as Spark hands them over, from `TopicWindow`s (tests, replays)."""
    loads = [w.load for w in windows]
    columns: dict[str, pa.Array] = {
        "window_end": pa.array(
            [w.window_end_ms * 1000 for w in windows], pa.timestamp("us", tz="UTC")
        ),
        "cluster": pa.array([w.cluster for w in windows], pa.string()),
        "namespace": pa.array([w.namespace for w in windows], pa.string()),
        "samples": pa.array([w.samples for w in windows], pa.int64()),
    }
    for name in TOPIC_COLUMNS:
        kind = (
            pa.string() if name == "topic" else pa.float64() if name in RATE_COLUMNS else pa.int64()
        )
        columns[name] = pa.array([getattr(t, name) for t in loads], kind)
    return pa.table(columns)


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
        known_ttl_windows: int = 3,
    ) -> None:
        self.spec = spec
        self.handler = handler
        self.layouts = layouts
        self.dead_letters = dead_letters
        self.clock_ms = clock_ms
        # A topic that has not reported for a few slides still belongs to its bundle.
        self.known = KnownTopics(ttl_ms=known_ttl_windows * spec.window_ms)
        self._query: StreamingQuery | None = None
        self._attached = threading.Event()

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
        closed = batch_df.toArrow()  # runs the batch: scan, window state, observations
        spark_s = time.monotonic() - started
        table = decode_windows(closed.column("payload").to_pylist())
        observed = BatchObservations.of_query(self.attached_query())
        self.handler.handle(self.report(batch_id, table, observed, started, spark_s=spark_s))

    def report(
        self,
        batch_id: int,
        closed: pa.Table | Sequence[TopicWindow],
        observed: BatchObservations,
        started: float,
        *,
        spark_s: float = 0.0,
    ) -> BatchReport:
        """The report of one batch: `closed` holds every per-topic window it closed."""
        table = closed if isinstance(closed, pa.Table) else windows_table(closed)
        self.dead_letters.write(batch_id, observed.dead_letters)
        rejected: Counter[str] = Counter()
        event_times: Counter[int] = Counter()
        consumed = 0
        lag: dict[int, int] = {}
        for s in observed.summaries:
            rejected.update(s.rejected)
            event_times.update(s.event_times)
            consumed += s.consumed
            if s.high_watermark is not None:
                lag[s.partition] = max(0, s.high_watermark - s.next_offset)
        late = late_events(event_times, observed.late_watermark_ms, self.spec)
        # Every topic that closed a window counts as seen; only the newest window is
        # reported (older ones closed in the same batch are superseded).
        self.known.observe(table)
        windows_closed = int(pc.count_distinct(table.column("window_end")).as_py())
        newest = NewestWindow.of(table)
        bundles, large = self._snapshot(newest)
        if newest.window_end_ms:
            self.known.expire(newest.window_end_ms)
        now_ms = self.clock_ms()
        delay_s = (now_ms - observed.watermark_ms) / 1000 if observed.watermark_ms > 0 else 0.0
        return BatchReport(
            batch_id=batch_id,
            window_end_ms=newest.window_end_ms,
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
            spark_s=spark_s,
            newest_event_ms=max(event_times, default=0),
        )

    def _snapshot(
        self, newest: NewestWindow
    ) -> tuple[list[BundleLoad], list[tuple[str, TopicLoad]]]:
        if not newest.window_end_ms:
            return [], []
        pairs = newest.table.group_by(["cluster", "namespace"]).aggregate([]).to_pylist()
        layouts: dict[tuple[str, str], NamespaceBundles] = {}
        known: dict[tuple[str, str], int | None] = {}
        for key in sorted((p["cluster"], p["namespace"]) for p in pairs):
            try:
                layouts[key] = self.layouts.layout(*key)
                known[key] = self.layouts.known_topics(*key)
            except Exception as exc:  # the admin API may be down: report the others
                log.warning("no bundle layout for %s/%s, skipped: %s", *key, exc)
        bundles = roll_up_newest(
            newest,
            layouts=layouts,
            known=self.known,
            namespace_known=known,
            wants_topics=self.handler.wants_topics,
        )
        threshold = self.handler.offload_min_bytes
        large = (
            []
            if threshold is None
            else [
                (cluster, load)
                for cluster, load in newest.large_topics(threshold)
                if (cluster, parse_topic(load.topic).namespace_name) in layouts
            ]
        )
        return bundles, large
