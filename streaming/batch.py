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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from balancer.bundles import NamespaceBundles
from balancer.load import BundleLoad, TopicLoad
from streaming.bundles import SeenTopics, TopicWindow, newest_window, roll_up_window
from streaming.deadletters import DeadLetter, DeadLetterSink
from streaming.handler import BatchHandler, BatchReport, LayoutProvider
from streaming.parse import ReadSummary
from streaming.windows import WindowSpec, late_events

log = logging.getLogger(__name__)

OBSERVATION_NAME = "pulsar_balancer_side"


@dataclass(frozen=True)
class BatchObservations:
    summaries: tuple[ReadSummary, ...]
    dead_letters: tuple[DeadLetter, ...]
    watermark_ms: int  # eviction watermark of this batch
    late_watermark_ms: int  # watermark Spark drops late rows against in this batch

    @classmethod
    def of_query(cls, query: Any) -> BatchObservations:
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


@dataclass(frozen=True, slots=True)
class ClosedWindows:
    """The newest closed window's per-topic rows of one batch, and how many windows closed."""

    windows: tuple[TopicWindow, ...]
    count: int
    # (cluster, namespace, topic, position, newest window end ms) of every topic that closed
    # any window in the batch, for the known-topics bookkeeping.
    seen: tuple[tuple[str, str, str, int, int], ...] = ()

    @classmethod
    def from_arrow(cls, table: Any) -> ClosedWindows:
        """Only the newest window is reported: older ones closed in the same batch are
        superseded, so they are dropped in Arrow before any Python object is built."""
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return cls((), 0)
        ends = table.column("window_end")
        count = int(pc.count_distinct(ends).as_py())
        keys = ["cluster", "namespace", "topic", "position"]
        per_topic = table.group_by(keys).aggregate([("window_end", "max")]).to_pydict()
        seen = tuple(
            (c, ns, t, int(p), int(e.timestamp() * 1000))
            for c, ns, t, p, e in zip(
                *(per_topic[k] for k in (*keys, "window_end_max")), strict=True
            )
        )
        table = table.filter(pc.equal(ends, pc.max(ends)))
        data = table.to_pydict()
        out = []
        for i in range(table.num_rows):
            end = data["window_end"][i]
            load = TopicLoad(
                topic=data["topic"][i],
                position=int(data["position"][i]),
                msg_rate_in=float(data["msg_rate_in"][i]),
                msg_rate_out=float(data["msg_rate_out"][i]),
                msg_throughput_in=float(data["msg_throughput_in"][i]),
                msg_throughput_out=float(data["msg_throughput_out"][i]),
                producer_count=int(data["producer_count"][i]),
                consumer_count=int(data["consumer_count"][i]),
                storage_size=int(data["storage_size"][i]),
                backlog_size=int(data["backlog_size"][i]),
                offloaded_storage_size=int(data["offloaded_storage_size"][i]),
            )
            out.append(
                TopicWindow(
                    cluster=data["cluster"][i],
                    namespace=data["namespace"][i],
                    window_end_ms=int(end.timestamp() * 1000),
                    load=load,
                    samples=int(data["samples"][i]),
                )
            )
        return cls(tuple(out), count, seen)


class BatchProcessor:
    """The foreachBatch function. Set `query` once the stream has started."""

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
        self.seen = SeenTopics(ttl_ms=known_ttl_windows * spec.window_ms)
        self.query: Any = None

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        table = batch_df.toArrow()
        observed = BatchObservations.of_query(self.query)
        closed = ClosedWindows.from_arrow(table)
        self.seen.observe_rows(closed.seen)
        report = self.report(
            batch_id, closed.windows, observed, started, windows_closed=closed.count
        )
        self.handler.handle(report)

    def report(
        self,
        batch_id: int,
        closed: Sequence[TopicWindow],
        observed: BatchObservations,
        started: float,
        *,
        windows_closed: int | None = None,
    ) -> BatchReport:
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
        self.seen.observe(closed)
        window_end = newest_window(closed)
        bundles, large = self._snapshot(closed, window_end)
        if window_end:
            self.seen.expire(window_end)
        now_ms = self.clock_ms()
        delay_s = (now_ms - observed.watermark_ms) / 1000 if observed.watermark_ms > 0 else 0.0
        return BatchReport(
            batch_id=batch_id,
            window_end_ms=window_end,
            bundles=tuple(bundles),
            large_topics=tuple(large),
            events_consumed=consumed,
            events_rejected=dict(rejected),
            events_late=late,
            kafka_lag=lag,
            watermark_delay_s=max(0.0, delay_s),
            duration_s=time.monotonic() - started,
            watermark_ms=observed.watermark_ms,
            windows_closed=(
                len({w.window_end_ms for w in closed}) if windows_closed is None else windows_closed
            ),
            dead_letters=len(observed.dead_letters),
        )

    def _snapshot(
        self, closed: Sequence[TopicWindow], window_end: int
    ) -> tuple[list[BundleLoad], list[tuple[str, TopicLoad]]]:
        if not window_end:
            return [], []
        newest = [w for w in closed if w.window_end_ms == window_end]
        layouts: dict[tuple[str, str], NamespaceBundles] = {}
        known: dict[tuple[str, str], int | None] = {}
        for key in sorted({(w.cluster, w.namespace) for w in newest}):
            try:
                layouts[key] = self.layouts.layout(*key)
                known[key] = self.layouts.known_topics(*key)
            except Exception as exc:  # the admin API may be down: report the others
                log.warning("no bundle layout for %s/%s, skipped: %s", *key, exc)
        newest = [w for w in newest if (w.cluster, w.namespace) in layouts]
        rolled = roll_up_window(
            newest, window_end_ms=window_end, layouts=layouts, seen=self.seen, namespace_known=known
        )
        bundles = [b if self.handler.wants_topics(b) else replace(b, topics=()) for b in rolled]
        threshold = self.handler.offload_min_bytes
        large = (
            []
            if threshold is None
            else [(w.cluster, w.load) for w in newest if w.load.storage_size >= threshold]
        )
        return bundles, large
