"""The foreachBatch step without Spark: observations + closed windows -> BatchReport."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from balancer.core.buckets import topic_bucket
from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchReport, StaticLayouts
from streaming.driver.batch import BatchObservations, BatchProcessor
from streaming.driver.deadletters import DeadLetter
from streaming.read.summary import ReadSummary
from streaming.stage.windows import WindowSpec
from tests.streaming.local_stage import LocalClosedWindows, LocalStage
from tests.streaming.rollup_reference import TopicWindow

NS = "t/ns"
END = 1_700_000_100_000


@dataclass
class RecordingHandler:
    offload_min_bytes: int | None = None
    topics_for: set[str] = field(default_factory=set)  # bundle texts
    reports: list[BatchReport] = field(default_factory=list)

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return str(bundle.bundle) in self.topics_for

    def handle(self, report: BatchReport) -> None:
        self.reports.append(report)


@dataclass
class RecordingSink:
    written: list[tuple[int, Sequence[DeadLetter]]] = field(default_factory=list)

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        self.written.append((batch_id, letters))

    def close(self) -> None:
        pass


def tw(topic: str, *, end: int = END, storage: int = 0) -> TopicWindow:
    name = f"persistent://{NS}/{topic}"
    load = TopicLoad(name, hash_position(name), 1.0, 1.0, 1.0, 1.0, 1, 1, storage_size=storage)
    return TopicWindow("c1", NS, end, load)


def closing(windows: Sequence[TopicWindow], stage: LocalStage | None = None) -> LocalClosedWindows:
    """The window stage's output for `windows` closing in one batch (3 PIP-157 buckets)."""
    stage = stage or LocalStage(window_ms=300_000, slide_ms=60_000, known_ttl_ms=900_000)
    return LocalClosedWindows(stage.close((topic_bucket(w.load.topic, 3), w) for w in windows))


def processor(handler: RecordingHandler, sink: RecordingSink) -> BatchProcessor:
    return BatchProcessor(
        spec=WindowSpec(300, 60, 120),
        handler=handler,
        layouts=StaticLayouts({("c1", NS): NamespaceBundles.initial(NS, 2)}),
        dead_letters=sink,
        clock_ms=lambda: END + 200_000,
    )


def observations(**kwargs: object) -> BatchObservations:
    summary = ReadSummary(
        0, 0, 10, high_watermark=15, messages=10, events=9,
        rejected=Counter({"bad_json": 1}),
        pane_events=Counter({END - 400_000 - 400_000 % 60_000: 2, END - END % 60_000: 7}),
        newest_event_ms=END + 5,
    )  # fmt: skip
    values: dict[str, object] = {
        "summaries": (summary, ReadSummary(1, 4, 4, high_watermark=4)),
        "dead_letters": (DeadLetter(b"{", "bad_json", "not valid JSON", 0, 3),),
        "watermark_ms": END + 60_000,
        "late_watermark_ms": END,
        **kwargs,
    }
    return BatchObservations(**values)  # type: ignore[arg-type]


def test_a_report_carries_counts_lag_late_and_the_newest_window() -> None:
    handler, sink = RecordingHandler(), RecordingSink()
    proc = processor(handler, sink)
    closed = [tw("a"), tw("b"), tw("a", end=END - 60_000)]
    report = proc.report(42, closing(closed), observations(), started=0.0)
    assert report.batch_id == 42 and report.window_end_ms == END
    assert report.events_consumed == 10 and report.events_rejected == {"bad_json": 1}
    assert report.events_late == 2  # the two events 400 s before the window end
    assert report.kafka_lag == {0: 5, 1: 0}
    assert report.watermark_ms == END + 60_000 and report.watermark_delay_s == 140.0
    assert report.newest_event_ms == END + 5
    assert report.windows_closed == 2 and report.dead_letters == 1
    assert sum(b.topic_count for b in report.bundles) == 2  # only the newest window
    assert sink.written == [(42, observations().dead_letters)]


def test_topics_only_for_the_bundles_the_handler_wants() -> None:
    layout = NamespaceBundles.initial(NS, 2)
    closed = [tw(f"x{i}") for i in range(20)]
    wanted = str(layout.find(closed[0].load.position))
    handler = RecordingHandler(topics_for={wanted})
    report = processor(handler, RecordingSink()).report(
        1, closing(closed), observations(), started=0.0
    )
    for b in report.bundles:
        assert (len(b.topics) == b.topic_count) if str(b.bundle) == wanted else b.topics == ()


def test_large_topics_need_a_threshold() -> None:
    closed = [tw("small", storage=10), tw("big", storage=10**12)]
    none = processor(RecordingHandler(), RecordingSink()).report(
        1, closing(closed), observations(), 0.0
    )
    assert none.large_topics == ()
    handler = RecordingHandler(offload_min_bytes=10**9)
    report = processor(handler, RecordingSink()).report(1, closing(closed), observations(), 0.0)
    assert [(c, t.topic) for c, t in report.large_topics] == [("c1", f"persistent://{NS}/big")]


def test_a_batch_without_closed_windows_reports_counts_only() -> None:
    proc = processor(RecordingHandler(), RecordingSink())
    report = proc.report(3, closing([]), observations(watermark_ms=0, late_watermark_ms=0), 0.0)
    assert (report.window_end_ms, report.bundles, report.events_late) == (0, (), 0)
    assert report.watermark_delay_s == 0.0 and report.events_consumed == 10


def test_offsets_the_read_tasks_skipped_are_logged_with_their_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 32: partitions gone with a recreated topic, and records a broker lost, are
    never skipped silently: the summaries count them, the driver's log says so."""
    gone = [ReadSummary(2, 40, 40, skipped_offsets=5, vanished=True),
            ReadSummary(3, 40, 40, vanished=True)]  # fmt: skip
    lost = ReadSummary(0, 7, 9, high_watermark=7, skipped_offsets=2)
    summaries = tuple(ReadSummary.from_json(s.to_json()) for s in [*gone, lost])
    assert summaries == (*gone, lost)
    proc = processor(RecordingHandler(), RecordingSink())
    with caplog.at_level("WARNING", logger="streaming.driver.batch"):
        report = proc.report(8, closing([]), observations(summaries=summaries), 0.0)
    # ... and the report counts them by cause, for the metric.
    assert report.offsets_skipped == {"partition_gone": 5, "records_lost": 2}
    assert [r.getMessage() for r in caplog.records] == [
        "batch 8: Kafka partition(s) [2, 3] no longer exist (the topic was recreated with "
        "fewer partitions): not read any more, 5 of the batch's planned offsets skipped",
        "batch 8: 2 Kafka offsets skipped, the broker no longer has them (by partition: {0: 2})",
    ]


class FlakyLayouts(StaticLayouts):
    def layout(self, cluster: str, namespace: str) -> NamespaceBundles:
        if namespace == "t/down":
            raise ConnectionError("admin API unreachable")
        return super().layout(cluster, namespace)


def test_a_namespace_without_a_layout_is_skipped_not_fatal() -> None:
    handler = RecordingHandler()
    proc = processor(handler, RecordingSink())
    proc.layouts = FlakyLayouts()
    down = TopicWindow("c1", "t/down", END, tw("z").load)
    report = proc.report(5, closing([tw("a"), down]), observations(), 0.0)
    assert {b.namespace for b in report.bundles} == {NS}
    assert report.events_consumed == 10


def test_only_the_newest_window_is_reported_but_every_topic_is_remembered() -> None:
    layout = NamespaceBundles.initial(NS, 2)
    handler = RecordingHandler(topics_for={str(b) for b in layout.bundles})
    proc = processor(handler, RecordingSink())
    stage = LocalStage(window_ms=300_000, slide_ms=60_000, known_ttl_ms=900_000)
    # d closes only an older window of this batch; e closed one in an earlier batch.
    earlier = proc.report(6, closing([tw("e", end=END - 120_000)], stage), observations(), 0.0)
    assert earlier.window_end_ms == END - 120_000
    batch = [tw("a"), tw("d", end=END - 60_000), tw("a", end=END - 60_000)]
    report = proc.report(7, closing(batch, stage), observations(), 0.0)
    assert (report.windows_closed, report.window_end_ms) == (2, END)
    assert [t.topic for b in report.bundles for t in b.topics] == [f"persistent://{NS}/a"]
    bundle_of = {t: layout.find(hash_position(f"persistent://{NS}/{t}")) for t in "ade"}
    (reported,) = report.bundles
    assert reported.bundle == bundle_of["a"]
    # d and e are known in their bundles although they did not report in the newest window.
    known_in_a = sum(1 for t in "ade" if bundle_of[t] == bundle_of["a"])
    assert reported.known_topics == known_in_a and reported.reported_topics == 1


def test_a_batch_waits_for_the_query_handle_and_fails_without_one() -> None:
    import threading

    proc = processor(RecordingHandler(), RecordingSink())
    with pytest.raises(RuntimeError, match="query handle not available"):
        proc.attached_query(timeout_s=0.0)
    query = object()
    # The first batch can call in before start() has returned the query: it gets it once
    # attached, whichever thread runs first.
    seen: list[object] = []
    waiter = threading.Thread(target=lambda: seen.append(proc.attached_query(timeout_s=30.0)))
    waiter.start()
    proc.attach(query)  # type: ignore[arg-type]
    waiter.join()
    assert seen == [query]
