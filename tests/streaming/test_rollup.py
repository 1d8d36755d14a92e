"""The bundle roll-up (partials on the executors, merged by the driver) equals the plain-Python
definition (tests.streaming.rollup_reference), exactly: whatever the buckets, floats included."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.buckets import topic_bucket
from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad
from balancer.core.report import BatchReport, StaticLayouts
from streaming.driver.batch import BatchObservations, BatchProcessor
from streaming.driver.closed_windows import Task
from streaming.driver.deadletters import DeadLetter
from streaming.shared.topic_keys import KEY_COLUMN
from streaming.stage.closing import KNOWN_SCHEMA, remember
from streaming.stage.partials import StageLayouts, bundle_index, stable_order, stage_roll_up
from streaming.stage.windows import WindowSpec
from tests.streaming.local_stage import LocalClosedWindows, LocalStage, window_rows
from tests.streaming.rollup_reference import SeenTopics, TopicWindow, roll_up_window

END = 1_700_000_100_000
NAMESPACES = [("c1", "t/a"), ("c1", "t/b"), ("c2", "t/a")]

rates = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=2**62)


def windows(minutes_before_end: st.SearchStrategy[int]) -> st.SearchStrategy[TopicWindow]:
    @st.composite
    def one(draw: st.DrawFn) -> TopicWindow:
        cluster, namespace = draw(st.sampled_from(NAMESPACES))
        topic = f"persistent://{namespace}/{draw(st.text('xyz0é', min_size=1, max_size=4))}"
        load = TopicLoad(
            topic, hash_position(topic), draw(rates), draw(rates), draw(rates), draw(rates),
            draw(counts), draw(counts), draw(counts), draw(counts), draw(counts),
        )  # fmt: skip
        end = END - 60_000 * draw(minutes_before_end)
        return TopicWindow(cluster, namespace, end, load, samples=draw(st.integers(1, 3)))

    return one()


def unique(ws: list[TopicWindow]) -> list[TopicWindow]:
    """One row per (cluster, topic, window end), as Spark's aggregation gives."""
    return list({(w.cluster, w.load.topic, w.window_end_ms): w for w in ws}.values())


layouts_st = st.lists(st.integers(1, 0xFFFFFFFE), max_size=6, unique=True).map(
    lambda inner: tuple(sorted({0, 0xFFFFFFFF, *inner}))
)


@dataclass
class Handler:
    want_every: int
    offload_min_bytes: int | None = None
    reports: list[BatchReport] = field(default_factory=list)

    def wants_topics(self, bundle: BundleLoad) -> bool:
        return bundle.bundle.lower % self.want_every == 0

    def handle(self, report: BatchReport) -> None:
        self.reports.append(report)


class NoDeadLetters:
    def write(self, batch_id: int, letters: object) -> None:
        pass

    def close(self) -> None:
        pass


class SplitClosedWindows(LocalClosedWindows):
    """Closed rows whose tasks each get `task_rows` of a window's rows (in the stage's order),
    as when the rows of one bucket's close reach several executors."""

    def __init__(
        self, closed: pa.Table, task_rows: int, stage_layouts: StageLayouts | None = None
    ) -> None:
        super().__init__(closed, stage_layouts)
        self.task_rows = task_rows

    def _run(self, window_end_ms: int, task: Task, schema: pa.Schema) -> pa.Table:
        rows = self.closed.filter(pc.equal(self.closed.column("window_end"), window_end_ms))
        out = [
            batch
            for start in range(0, rows.num_rows, self.task_rows)
            for batch in task(iter(rows.slice(start, self.task_rows).to_batches()))
        ]
        return pa.Table.from_batches(out, schema=schema)


OBSERVED = BatchObservations(summaries=(), dead_letters=(), watermark_ms=0, late_watermark_ms=0)
NO_LETTERS: tuple[DeadLetter, ...] = ()


@settings(max_examples=150, deadline=None)
@given(
    # Earlier batches closed older windows than this batch: the watermark only moves on.
    history=st.lists(windows(st.integers(2, 5)), max_size=30).map(unique),
    batch=st.lists(windows(st.integers(0, 1)), max_size=40).map(unique),
    boundaries=st.lists(layouts_st, min_size=3, max_size=3),
    known_total=st.one_of(st.none(), st.integers(0, 100)),
    want_every=st.integers(1, 3),
    num_buckets=st.integers(1, 4),
    min_storage=st.one_of(st.none(), st.integers(0, 2**62)),
    part_rows=st.sampled_from([1, 2, 5, 200_000]),  # closes cut into parts of this many topics
    task_rows=st.sampled_from([1, 2, 3, 1_000]),  # closed rows per executor task
    # The layouts the stage rolled its closes up with: none, those in force, stale ones (a
    # split since), or those in force and more namespaces.
    stage_kind=st.sampled_from(["none", "in force", "stale", "more"]),
    # The driver's property: closes a later close of the bucket supersedes are heads only.
    newest_only=st.booleans(),
)
def test_bucketed_roll_up_equals_the_reference(
    history: list[TopicWindow],
    batch: list[TopicWindow],
    boundaries: list[tuple[int, ...]],
    known_total: int | None,
    want_every: int,
    num_buckets: int,
    min_storage: int | None,
    part_rows: int,
    task_rows: int,
    stage_kind: str,
    newest_only: bool,
) -> None:
    layouts = {
        key: NamespaceBundles(key[1], b) for key, b in zip(NAMESPACES, boundaries, strict=True)
    }
    namespace_known = {key: known_total for key in NAMESPACES}
    window_ms, ttl_ms = 120_000, 150_000
    # Reference: topics seen within the TTL before the newest window's end, one object each.
    seen = SeenTopics(ttl_ms)
    seen.observe(history)
    seen.observe(batch)
    newest_end = max((w.window_end_ms for w in batch), default=0)
    seen.expire(newest_end)
    newest = [w for w in batch if w.window_end_ms == newest_end]
    want = roll_up_window(
        newest, window_end_ms=newest_end, layouts=layouts, seen=seen,
        namespace_known=namespace_known,
    )  # fmt: skip
    # The stream: per-bucket closes (the stage), executor partials, the driver's merge.
    handler = Handler(want_every, offload_min_bytes=min_storage)
    processor = BatchProcessor(
        spec=WindowSpec(window_ms // 1000, 60, 60),
        handler=handler,
        layouts=StaticLayouts(
            layouts, known={k: v for k, v in namespace_known.items() if v is not None}
        ),
        dead_letters=NoDeadLetters(),
    )
    stage = LocalStage(
        window_ms=window_ms, slide_ms=60_000, known_ttl_ms=ttl_ms, part_rows=part_rows
    )
    stage_layouts = {
        "none": None,
        "in force": StageLayouts(layouts, min_storage),
        "stale": StageLayouts(
            {**layouts, NAMESPACES[0]: NamespaceBundles(NAMESPACES[0][1], (0, 0xFFFFFFFF))},
            min_storage,
        ),
        "more": StageLayouts(
            {**layouts, ("c3", "t/c"): NamespaceBundles("t/c", (0, 0xFFFFFFFF))}, min_storage
        ),
    }[stage_kind]
    partials_of = None if stage_layouts is None else stage_roll_up(stage_layouts)
    for batch_id, step in enumerate((history, batch)):
        closed = stage.close(
            ((topic_bucket(w.load.topic, num_buckets), w) for w in step),
            partials_of,
            newest_only=newest_only,
        )
        tasks = SplitClosedWindows(closed, task_rows, stage_layouts)
        jobs_before = processor.partials_jobs
        handler.handle(processor.report(batch_id, tasks, OBSERVED, 0.0))
    got = handler.reports[-1]
    assert got.window_end_ms == newest_end
    assert list(got.bundles) == want  # every field but topics (compare=False), floats exactly
    for g, w in zip(got.bundles, want, strict=True):
        assert g.topics == (w.topics if handler.wants_topics(replace(w, topics=())) else ())
    want_large = sorted(
        ((w.cluster, w.load) for w in newest if min_storage is not None
         and w.load.storage_size >= min_storage),
        key=lambda cl: (cl[0], parse_ns(cl[1].topic), cl[1].position, cl[1].topic),
    )  # fmt: skip
    assert list(got.large_topics) == want_large
    # The stage's partials are taken exactly when its layouts are those in force for the
    # newest window's namespaces.
    stale = NAMESPACES[0] in {(w.cluster, w.namespace) for w in newest} and layouts[
        NAMESPACES[0]
    ].boundaries != (0, 0xFFFFFFFF)
    took_stage = stage_kind in ("in force", "more") or (stage_kind == "stale" and not stale)
    if newest_end:
        assert processor.partials_jobs == jobs_before + (0 if took_stage else 1)


def parse_ns(topic: str) -> str:
    return topic.split("://", 1)[1].rsplit("/", 1)[0]


def test_known_topics_expire_after_the_ttl_and_keep_the_newest_end() -> None:
    def w(topic: str, end: int) -> TopicWindow:
        name = f"persistent://t/a/{topic}"
        return TopicWindow("c1", "t/a", end, TopicLoad(name, hash_position(name)))

    def rows(*ws: TopicWindow) -> object:
        return window_rows(list(ws), bucket=0, window_ms=120_000)

    known = remember(
        KNOWN_SCHEMA.empty_table(),
        rows(w("x", END - 180_000), w("y", END - 180_000)),  # type: ignore[arg-type]
        end_ms=END - 180_000,
        ttl_ms=120_000,
    )
    assert known.num_rows == 2
    known = remember(known, rows(w("x", END)), end_ms=END, ttl_ms=120_000)  # type: ignore[arg-type]
    # y was last seen 180 s before this window's end: gone; x was refreshed.
    assert known.drop_columns([KEY_COLUMN]).to_pylist() == [
        {"cluster": "c1", "namespace": "t/a", "position": hash_position("persistent://t/a/x"),
         "end_ms": END},
    ]  # fmt: skip


def test_bundle_index_matches_find_including_the_top_of_the_range() -> None:
    layout = NamespaceBundles("t/a", (0, 0x40000000, 0x80000000, 0xFFFFFFFF))
    positions = [0, 1, 0x3FFFFFFF, 0x40000000, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
    got = bundle_index(layout, np.array(positions, dtype=np.int64)).tolist()
    want = [layout.bundles.index(layout.find(p)) for p in positions]
    assert got == want == [0, 0, 0, 1, 2, 2, 2]


@pytest.mark.parametrize("task_rows", [1, 2, 1_000])
def test_a_close_in_parts_over_several_tasks_counts_each_known_topic_once(task_rows: int) -> None:
    # Five topics of one namespace in one bucket, closed in parts of one topic: whichever
    # tasks the parts reach, the namespace's topics seen are five, so the bundle's known
    # count is scaled by exactly 20 / 5.
    layout = NamespaceBundles.initial("t/a", 1)
    loads = [
        TopicLoad(f"persistent://t/a/{i}", hash_position(f"persistent://t/a/{i}")) for i in range(5)
    ]
    stage = LocalStage(window_ms=120_000, slide_ms=60_000, known_ttl_ms=150_000, part_rows=1)
    closed = stage.close((0, TopicWindow("c1", "t/a", END, load)) for load in loads)
    handler = Handler(want_every=1)
    processor = BatchProcessor(
        spec=WindowSpec(120, 60, 60),
        handler=handler,
        layouts=StaticLayouts({("c1", "t/a"): layout}, known={("c1", "t/a"): 20}),
        dead_letters=NoDeadLetters(),
    )
    handler.handle(processor.report(0, SplitClosedWindows(closed, task_rows), OBSERVED, 0.0))
    (bundle,) = handler.reports[-1].bundles
    assert (bundle.reported_topics, bundle.known_topics) == (5, 20)


def report_of(
    closed: pa.Table, layout: NamespaceBundles, stage_layouts: StageLayouts
) -> tuple[BatchProcessor, BatchReport]:
    """The driver's report of one batch's closed rows of namespace t/a on c1."""
    processor = BatchProcessor(
        spec=WindowSpec(120, 60, 60),
        handler=Handler(want_every=1),
        layouts=StaticLayouts({("c1", "t/a"): layout}, known={}),
        dead_letters=NoDeadLetters(),
    )
    report = processor.report(0, LocalClosedWindows(closed, stage_layouts), OBSERVED, 0.0)
    return processor, report


def test_only_closes_the_driver_may_roll_up_carry_the_stages_partials() -> None:
    # The driver rolls up the batch's newest window with topics. Bucket 0 closes two windows
    # with topics (the older is superseded), then fill-ins up to bucket 1's newer window
    # (either may be the batch's newest): all but the superseded close carry partials, on
    # part 0 only, and the driver needs no job of its own.
    layout = NamespaceBundles.initial("t/a", 4)
    topic = "persistent://t/a/x"
    load = TopicLoad(topic, hash_position(topic), msg_rate_in=5.0)
    minute = 60_000
    stage = LocalStage(window_ms=120_000, slide_ms=minute, known_ttl_ms=600_000, part_rows=1)
    stage_layouts = StageLayouts({("c1", "t/a"): layout}, None)
    closed = stage.close(
        [
            (0, TopicWindow("c1", "t/a", END - 3 * minute, load)),
            (0, TopicWindow("c1", "t/a", END - 2 * minute, load)),
            (1, TopicWindow("c1", "t/a", END, replace(load, topic=topic + "y"))),
            (1, TopicWindow("c1", "t/a", END, replace(load, topic=topic + "z"))),
        ],
        stage_roll_up(stage_layouts),
    )
    carried = {
        (row["bucket"], (END - row["window_end"]) // minute, row["part"]): row["partials"]
        is not None
        for row in closed.to_pylist()
    }
    assert carried == {
        (0, 3, 0): False,  # superseded by the close two minutes before END
        (0, 2, 0): True,
        (0, 1, 0): True,  # fill-ins
        (0, 0, 0): True,
        (1, 0, 0): True,
        (1, 0, 1): False,  # part 1 of bucket 1's close
    }
    processor, report = report_of(closed, layout, stage_layouts)
    assert processor.partials_jobs == 0  # the stage's partials: no job of the driver's
    assert report.window_end_ms == END
    assert sum(b.reported_topics for b in report.bundles) == 2
    assert sum(b.known_topics for b in report.bundles) == 3  # x, known from bucket 0


def test_with_newest_only_a_superseded_close_is_a_head_and_the_report_is_the_same() -> None:
    # Bucket 0 closes three windows with topics in one batch, then a fill-in: the first two
    # are superseded (one head each, whatever their parts), the third is whole; the report
    # is the one every close's rows give.
    layout = NamespaceBundles.initial("t/a", 4)
    minute = 60_000
    loads = [TopicLoad(f"persistent://t/a/{i}", hash_position(f"persistent://t/a/{i}"),
                       msg_rate_in=float(i)) for i in range(3)]  # fmt: skip
    windows = [
        (0, TopicWindow("c1", "t/a", END - back * minute, load))
        for back in (4, 3, 2)
        for load in loads[: 5 - back]  # 1, 2 and 3 topics
    ]
    windows.append(
        (1, TopicWindow("c1", "t/a", END, replace(loads[0], topic="persistent://t/a/y")))
    )
    stage_layouts = StageLayouts({("c1", "t/a"): layout}, None)
    reports, jobs = {}, {}
    for newest_only in (False, True):
        stage = LocalStage(window_ms=120_000, slide_ms=minute, known_ttl_ms=600_000, part_rows=1)
        closed = stage.close(windows, stage_roll_up(stage_layouts), newest_only=newest_only)
        rows = {
            (row["bucket"], (END - row["window_end"]) // minute, row["part"]): row
            for row in closed.to_pylist()
        }
        if newest_only:
            for back, topics in ((4, 1), (3, 2)):  # the superseded closes: a head each
                head = rows[(0, back, 0)]
                assert (head["topics"], head["namespaces"], head["payload"], head["known"]) == (
                    topics, None, None, None,
                )  # fmt: skip
                assert (0, back, 1) not in rows and head["partials"] is None
        else:
            assert rows[(0, 3, 1)]["payload"] is not None  # every close has its parts
        # The newest close with topics and the fill-ins after it are whole, in parts.
        assert [rows[(0, 2, part)]["topics"] for part in range(3)] == [1, 1, 1]
        assert rows[(0, 2, 0)]["partials"] is not None
        assert rows[(0, 1, 0)]["payload"] is not None and rows[(0, 0, 0)]["known"] is not None
        ends = [row["window_end"] for row in closed.to_pylist()]
        assert ends == [*sorted(ends[:-1]), END]  # bucket 0 oldest first, then bucket 1
        processor, report = report_of(closed, layout, stage_layouts)
        reports[newest_only] = replace(report, duration_s=0.0)  # the clock's, not the rows'
        jobs[newest_only] = processor.partials_jobs
    assert reports[True].bundles and jobs[True] == 0  # the stage's partials, no job of its own
    assert reports[True] == reports[False]
    assert sum(b.reported_topics for b in reports[True].bundles) == 1  # y, in the newest window


@given(codes=st.lists(st.integers(0, 40_000), max_size=300), wide=st.booleans())
def test_stable_order_is_numpys_stable_argsort(codes: list[int], wide: bool) -> None:
    # Codes below 2**15 take the 16-bit path unless `distinct` says they may be wider.
    values = np.array([c if wide else c % (1 << 15) for c in codes], dtype=np.int64)
    distinct = 40_001 if wide else 1 << 15
    assert stable_order(values, distinct).tolist() == np.argsort(values, kind="stable").tolist()
