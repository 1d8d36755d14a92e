"""A batch's closed windows, as the driver reads them: heads, bundle partials, topic rows.

The window stage emits one row per closed (bucket, window) (`streaming.stage.closing`). The
driver never collects those rows whole: it reads their heads (window, bucket, how many
topics reported, which namespaces, and the partials the stage rolled its closes up to when
it was given layouts), takes those partials when their layouts are still in force
(`stage_partials`) or else asks for the bundle partials of the newest window with the
layouts in force (and the offload candidates with them), then, only when a bundle is near
a limit, for that bundle's per-topic rows. The per-row work
(`partials_task`, `topic_rows_task`) is the same code on Spark's executors
(`SparkClosedWindows`, through `mapInArrow`) and in-process in the tests
(`tests/streaming/local_stage.py`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from streaming.driver.rollup import decode_known, large_topics_of
from streaming.shared.packing import decode, decode_windows
from streaming.stage.partials import (
    PARTIAL_SCHEMA,
    TOPIC_ROWS_SCHEMA,
    BundleKey,
    Layouts,
    StageLayouts,
    close_partials,
    large_topics_row,
    topic_rows,
)

if TYPE_CHECKING:  # the driver imports pyspark; this module runs without it in tests
    from pyspark.sql import DataFrame

HEAD_COLUMNS = ("window_end", "bucket", "part", "topics", "namespaces", "partials")

# What `partials_task` reads of a closed row.
_PARTIAL_INPUTS = ["window_end", "bucket", "part", "payload", "known"]

Task = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def partials_task(layouts: Layouts, min_storage_bytes: int | None) -> Task:
    """The executors' work for `partials`: closed rows in, partial rows out (and a row with
    the large topics, so that offload candidates need no pass of their own).

    The parts of one closed (bucket, window) that reach a task are rolled up together: the
    work per bundle (its exact sums, its row) is paid once per bucket, not once per part (at
    10M topics in 4 buckets, a bucket's close has 13 parts). The stage emits a bucket's
    parts from one task, so they reach one task here; were they split, each task's share
    would be its own row, numbered by its first part (`merge_partials` keys namespace
    counts on it).
    """

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        closes: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for batch in batches:
            for row in batch.select(_PARTIAL_INPUTS).to_pylist():
                closes[(row["window_end"], row["bucket"])].append(row)
        for (_, bucket), parts in closes.items():
            window = decode_windows([part["payload"] for part in parts])
            known = decode_known([part["known"] for part in parts])
            first = min(part["part"] for part in parts)
            yield from close_partials(
                window, known, layouts, bucket=bucket, part=first,
                min_storage_bytes=min_storage_bytes,
            ).to_batches()  # fmt: skip

    return task


def topic_rows_task(
    layouts: Layouts, wanted: Collection[BundleKey], min_storage_bytes: int | None
) -> Task:
    """The executors' work for `topic_rows`: closed rows in, the rows the driver needs out."""
    wanted_set = frozenset(wanted)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("payload").to_pylist():
                yield from topic_rows(
                    decode_windows([payload]),
                    layouts,
                    wanted=wanted_set,
                    min_storage_bytes=min_storage_bytes,
                ).to_batches()

    return task


class ClosedWindows(ABC):
    """A batch's closed windows. `partials` and `topic_rows` run a task on the rows of one
    window (`_run`): in-process or on Spark's executors."""

    spark_s: float = 0.0  # time spent running Spark jobs (0 in-process)
    # The layouts the stage was given to roll its closes up with (None: none).
    stage_layouts: StageLayouts | None = None

    @abstractmethod
    def heads(self) -> pa.Table:
        """`window_end` (epoch ms), `bucket`, `part`, `topics`, `namespaces` and the stage's
        `partials` (part 0 of a close, when the stage had layouts) of every closed row."""

    def stage_partials(
        self, window_end_ms: int, layouts: Layouts, min_storage_bytes: int | None
    ) -> pa.Table | None:
        """`partials` as the stage computed them in its closes, when it computed them with
        `layouts` (and that offload size) for every close of the window; else None.

        Rows of namespaces outside `layouts` are left out, as `partials` leaves them out.
        """
        stage = self.stage_layouts
        if stage is None or not stage.in_force(layouts, min_storage_bytes):
            return None
        heads = self.heads()
        rows = heads.filter(
            pc.and_(
                pc.equal(heads.column("window_end"), window_end_ms),
                pc.equal(heads.column("part"), 0),
            )
        )
        payloads = rows.column("partials").to_pylist()
        if None in payloads:
            return None
        partials = decode(payloads, PARTIAL_SCHEMA)
        if stage.layouts.keys() <= layouts.keys():
            return partials
        # The stage's layouts hold namespaces `layouts` has not (one whose layout could not
        # be fetched now): leave theirs out.
        bundles = partials.filter(pc.is_null(partials.column("large_topics")))
        in_layouts = _in_layouts(bundles, layouts)
        large = large_topics_of(partials)
        large = large.filter(_in_layouts(large, layouts))
        kept = [bundles.filter(in_layouts)]
        return pa.concat_tables([*kept, large_topics_row(large)] if large.num_rows else kept)

    @abstractmethod
    def _run(self, window_end_ms: int, task: Task, schema: pa.Schema) -> pa.Table:
        """`task` over the closed rows of the window ending at `window_end_ms`."""

    def partials(
        self, window_end_ms: int, layouts: Layouts, min_storage_bytes: int | None
    ) -> pa.Table:
        """PARTIAL_SCHEMA rows of the window ending at `window_end_ms`, over all buckets,
        with the topic rows at least `min_storage_bytes` large (None: none)."""
        return self._run(window_end_ms, partials_task(layouts, min_storage_bytes), PARTIAL_SCHEMA)

    def topic_rows(
        self,
        window_end_ms: int,
        layouts: Layouts,
        *,
        wanted: Collection[BundleKey],
        min_storage_bytes: int | None,
    ) -> pa.Table:
        """TOPIC_ROWS_SCHEMA rows of that window: the `wanted` bundles' and the large topics.

        The large topics come with the partials already: the driver asks for the wanted
        bundles only (`min_storage_bytes` None)."""
        task = topic_rows_task(layouts, wanted, min_storage_bytes)
        return self._run(window_end_ms, task, TOPIC_ROWS_SCHEMA)


def _in_layouts(table: pa.Table, layouts: Layouts) -> pa.Array:
    """Whether each row's (cluster, namespace) has a layout in `layouts`."""
    pairs = zip(
        table.column("cluster").to_pylist(), table.column("namespace").to_pylist(), strict=True
    )
    return pa.array([pair in layouts for pair in pairs], pa.bool_())


class SparkClosedWindows(ClosedWindows):
    """A micro-batch's closed windows in Spark: persisted, so the stateful stage runs once
    however many times the driver reads it; `release` when the batch is done."""

    def __init__(self, df: DataFrame, stage_layouts: StageLayouts | None = None) -> None:
        from pyspark import StorageLevel

        self.df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.stage_layouts = stage_layouts
        self.spark_s = 0.0
        self._heads: pa.Table | None = None

    def _timed(self, run: Callable[[], pa.Table]) -> pa.Table:
        started = time.monotonic()
        try:
            return run()
        finally:
            self.spark_s += time.monotonic() - started

    def heads(self) -> pa.Table:
        if self._heads is None:  # the first read runs the batch
            self._heads = self._timed(lambda: self.df.select(*HEAD_COLUMNS).toArrow())
        return self._heads

    def _run(self, window_end_ms: int, task: Task, schema: pa.Schema) -> pa.Table:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        rows = self.df.filter(F.col("window_end") == F.lit(window_end_ms))
        mapped = rows.mapInArrow(task, from_arrow_schema(schema))
        return self._timed(lambda: mapped.toArrow().cast(schema))

    def release(self) -> None:
        self.df.unpersist()


__all__ = [
    "HEAD_COLUMNS",
    "ClosedWindows",
    "SparkClosedWindows",
    "Task",
    "partials_task",
    "topic_rows_task",
]
