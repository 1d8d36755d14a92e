"""The window stage's closes and the driver's reads of them, in-process (test oracles).

`LocalStage` runs the stage's closing steps (`streaming.stage.closing.BucketCloses`) over
`TopicWindow`s, without Spark; `LocalClosedWindows` runs the driver's per-row tasks
(`streaming.driver.closed_windows`) over those rows in memory, as `SparkClosedWindows` runs
them on the executors. Tests only: the product runs both on Spark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from streaming.driver.closed_windows import HEAD_COLUMNS, ClosedWindows, Task
from streaming.shared.packing import KEYED_WINDOW_SCHEMA
from streaming.shared.schema import CLOSED_ARROW_SCHEMA, LATEST_COLUMNS, RATE_COLUMNS
from streaming.shared.topic_keys import KEY_COLUMN, topic_keys
from streaming.stage.closing import (
    CLOSE_PART_ROWS,
    KNOWN_SCHEMA,
    BucketCloses,
    ClosedWindow,
    PartialsOf,
    closed_table,
)
from streaming.stage.partials import StageLayouts
from tests.streaming.rollup_reference import TopicWindow


def window_rows(windows: Sequence[TopicWindow], *, bucket: int, window_ms: int) -> pa.Table:
    """Per-topic rows (KEYED_WINDOW_SCHEMA) from `TopicWindow`s, as the aggregation gives."""
    loads = [w.load for w in windows]
    us = [w.window_end_ms * 1000 for w in windows]
    keys = topic_keys([w.cluster for w in windows], [t.topic for t in loads])
    columns: dict[str, pa.Array] = {
        "window_start": pa.array([u - window_ms * 1000 for u in us], pa.timestamp("us", "UTC")),
        "window_end": pa.array(us, pa.timestamp("us", "UTC")),
        "bucket": pa.array([bucket] * len(windows), pa.int32()),
        "cluster": pa.array([w.cluster for w in windows], pa.string()),
        "namespace": pa.array([w.namespace for w in windows], pa.string()),
        "topic": pa.array([t.topic for t in loads], pa.string()),
        "position": pa.array([t.position for t in loads], pa.int64()),
        **{n: pa.array([getattr(t, n) for t in loads], pa.float64()) for n in RATE_COLUMNS},
        **{n: pa.array([getattr(t, n) for t in loads], pa.int64()) for n in LATEST_COLUMNS},
        "samples": pa.array([w.samples for w in windows], pa.int64()),
        KEY_COLUMN: pa.array(keys),
    }
    return pa.table(columns, schema=KEYED_WINDOW_SCHEMA)


class LocalStage:
    """The window stage's closing steps in-process: per-bucket known topics across batches.

    `close` takes the per-topic windows that closed in one batch (each with its bucket) and
    gives the stage's output rows as Spark gives them: each bucket's windows oldest first,
    and while a bucket knows topics, every slide up to the batch's newest window closed too
    (with no topics of its own: the stage's fill-in closes).
    """

    def __init__(
        self,
        *,
        window_ms: int,
        slide_ms: int,
        known_ttl_ms: int,
        part_rows: int = CLOSE_PART_ROWS,
    ) -> None:
        self.window_ms = window_ms
        self.slide_ms = slide_ms
        self.known_ttl_ms = known_ttl_ms
        self.part_rows = part_rows
        self._known: dict[int, pa.Table] = {}
        self._last_end_ms: dict[int, int] = {}

    def close(
        self,
        windows: Iterable[tuple[int, TopicWindow]],
        partials_of: PartialsOf | None = None,
        *,
        newest_only: bool = False,
    ) -> pa.Table:
        by_key: dict[tuple[int, int], list[TopicWindow]] = defaultdict(list)
        for bucket, w in windows:
            by_key[(bucket, w.window_end_ms)].append(w)
        newest_ms = max((end for _, end in by_key), default=0)
        out: list[ClosedWindow] = []
        for bucket in sorted({b for b, _ in by_key} | set(self._known)):
            closes = BucketCloses(bucket=bucket, ttl_ms=self.known_ttl_ms,
                                  part_rows=self.part_rows, partials_of=partials_of,
                                  newest_only=newest_only)  # fmt: skip
            pending = sorted(end for b, end in by_key if b == bucket)
            last = self._last_end_ms.get(bucket)
            fill = None if last is None else last + self.slide_ms
            while True:
                known = self._known.get(bucket, KNOWN_SCHEMA.empty_table())
                can_fill = fill is not None and known.num_rows > 0 and fill <= newest_ms
                if pending and (not can_fill or pending[0] <= fill):  # type: ignore[operator]
                    end_ms = pending.pop(0)
                elif can_fill:
                    end_ms = fill  # type: ignore[assignment]
                else:
                    break
                rows = window_rows(by_key.get((bucket, end_ms), []), bucket=bucket,
                                   window_ms=self.window_ms)  # fmt: skip
                self._known[bucket] = closes.close(
                    rows, known, start_ms=end_ms - self.window_ms, end_ms=end_ms
                )
                self._last_end_ms[bucket] = end_ms
                fill = end_ms + self.slide_ms
            out.extend(closes.finish())
        return closed_table(out)


class LocalClosedWindows(ClosedWindows):
    """Closed-window rows (CLOSED_ARROW_SCHEMA) held in memory; the tasks run in-process."""

    def __init__(self, closed: pa.Table, stage_layouts: StageLayouts | None = None) -> None:
        self.closed = closed.cast(CLOSED_ARROW_SCHEMA)
        self.stage_layouts = stage_layouts

    def heads(self) -> pa.Table:
        return self.closed.select(list(HEAD_COLUMNS))

    def _run(self, window_end_ms: int, task: Task, schema: pa.Schema) -> pa.Table:
        rows = self.closed.filter(pc.equal(self.closed.column("window_end"), window_end_ms))
        return pa.Table.from_batches(list(task(iter(rows.to_batches()))), schema=schema)
