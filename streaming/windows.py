"""Event-time sliding windows per topic: the window arithmetic and the Spark stage.

The arithmetic (pure, used by the driver and the tests) is Spark's: a window of
`window_ms` sliding by `slide_ms` holds the events with `start <= t < start + window_ms`,
starts are multiples of `slide_ms`, so an event lies in `window_ms / slide_ms` windows.

The Spark stage works on event packs (`streaming.packing`): one row per (PIP-157 bucket,
pane) from each read task. A pack goes to every window holding its pane; the state of an
open (bucket, window) is its packs, in RocksDB list state (`transformWithStateInPandas`),
and Spark places it by the hash of (bucket, window start), which spreads a namespace with
millions of topics evenly. When the watermark passes the window's end, its packs are
aggregated into one row per topic and leave the stage as one Arrow payload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from balancer.core.window_rules import WindowRuleError, check_windows
from streaming.packing import (
    PACK_SCHEMA,
    aggregate_window,
    decode,
    encode,
)
from streaming.schema import RowKind

# Window, slide and watermark lengths that do not fit together.
WindowConfigError = WindowRuleError


@dataclass(frozen=True, slots=True)
class WindowSpec:
    # No defaults: the lengths come from the config (balancer.app.config.SparkConfig) only.
    window_s: int
    slide_s: int
    watermark_s: int

    def __post_init__(self) -> None:
        check_windows(self.window_s, self.slide_s, self.watermark_s)

    @property
    def window_ms(self) -> int:
        return self.window_s * 1000

    @property
    def slide_ms(self) -> int:
        return self.slide_s * 1000


def window_starts_ms(event_ms: int, spec: WindowSpec) -> list[int]:
    """Starts of every window holding an event at `event_ms`, oldest first. Pure."""
    last = event_ms - event_ms % spec.slide_ms
    first = last - spec.window_ms + spec.slide_ms
    return list(range(first, last + 1, spec.slide_ms))


def first_window_end_ms(event_ms: int, spec: WindowSpec) -> int:
    """End of the oldest window holding the event: it closes first. Pure."""
    return window_starts_ms(event_ms, spec)[0] + spec.window_ms


def late_events(event_times: Mapping[int, int], watermark_ms: int, spec: WindowSpec) -> int:
    """Events (event time -> count) that missed a window because it had already closed.

    Spark drops an event from every window whose end is <= the watermark; an event is late
    when the first of its windows was already closed. Pure.
    """
    if watermark_ms <= 0:
        return 0
    return sum(n for t, n in event_times.items() if first_window_end_ms(t, spec) <= watermark_ms)


# Output of the window stage (what foreachBatch receives): one row per closed (bucket,
# window), its per-topic rows as an Arrow payload (streaming.packing.WINDOW_SCHEMA).
WINDOW_OUTPUT_SCHEMA = StructType(
    [
        StructField("window_start", LongType()),  # epoch ms
        StructField("window_end", LongType()),
        StructField("bucket", IntegerType()),
        StructField("payload", BinaryType()),
    ]
)
# The state of an open (bucket, window): its packs in arrival order (a list: appending
# writes only the new packs).
PACKS_STATE_SCHEMA = StructType([StructField("payload", BinaryType())])

WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey


def closed_window(bucket: int, start_ms: int, end_ms: int, packs: list[bytes]) -> pd.DataFrame:
    """The output row of a closed (bucket, window): its per-topic rows as one payload."""
    table = aggregate_window(
        decode(packs, PACK_SCHEMA), bucket=bucket, window_start_ms=start_ms, window_end_ms=end_ms
    )
    return pd.DataFrame(
        {
            "window_start": [start_ms],
            "window_end": [end_ms],
            "bucket": [bucket],
            "payload": [encode(table)],
        }
    )


class WindowPacks(StatefulProcessor):  # type: ignore[misc]  # pyspark is untyped here
    """Keeps the packs of each open (bucket, window); aggregates them when it closes.

    New packs are appended to the window's list state, with an event-time timer at the
    window's end; when the watermark reaches the end, the packs are aggregated into one
    row per topic (`streaming.packing.aggregate_window`) and the state is cleared. Spark
    itself drops the packs of windows that had closed before the batch (late events, counted
    by the driver with the same rule: `late_events`).
    """

    def __init__(self, spec: WindowSpec) -> None:
        self.window_ms = spec.window_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.packs = handle.getListState("packs", PACKS_STATE_SCHEMA)

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        bucket, start_ms = int(key[0]), int(key[1])
        end_ms = start_ms + self.window_ms
        new = [bytes(p) for frame in rows for p in frame["payload"]]
        if end_ms <= timerValues.getCurrentWatermarkInMs():  # closes in this very batch
            stored = self._take_stored()
            if stored:
                self.handle.deleteTimer(end_ms - 1)
            yield closed_window(bucket, start_ms, end_ms, [*stored, *new])
            return
        if not self.packs.exists():
            # Fires once the watermark is past end - 1, i.e. at end: when Spark closes windows.
            self.handle.registerTimer(end_ms - 1)
        self.packs.appendList([(p,) for p in new])

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        # Spark removes the expired timer itself.
        bucket, start_ms = int(key[0]), int(key[1])
        yield closed_window(bucket, start_ms, start_ms + self.window_ms, self._take_stored())

    def _take_stored(self) -> list[bytes]:
        """The window's stored packs, in arrival order; the state is cleared."""
        if not self.packs.exists():
            return []
        packs = [bytes(p) for (p,) in self.packs.get()]
        self.packs.clear()
        return packs


def topic_windows(parsed: DataFrame, spec: WindowSpec) -> DataFrame:
    """Closed per-topic windows, one row per (bucket, window) with the topics as payload.

    `parsed` is the source's output (all row kinds); only packs are windowed. Each pack
    belongs to the `window / slide` windows holding its pane; the state of a (bucket,
    window) is its packs, kept in Spark's state store (checkpointed with the offsets) and
    placed by the hash of (bucket, window start). Append mode: a window's rows come out
    once, when the watermark passes its end.
    """
    panes_per_window = spec.window_ms // spec.slide_ms
    packs = parsed.filter(F.col("kind") == int(RowKind.PACK)).withWatermark(
        "event_time", f"{spec.watermark_s} seconds"
    )
    exploded = packs.select(
        "bucket",
        F.explode(
            F.sequence(
                F.col("pane_start") - (panes_per_window - 1) * spec.slide_ms,
                F.col("pane_start"),
                F.lit(spec.slide_ms).cast("long"),
            )
        ).alias("window_start"),
        "payload",
    )
    # Spark drops a grouped row older than the watermark: the row's event time is its
    # window's last millisecond, so a pack is dropped from exactly the windows that have
    # closed (Spark's rule for a windowed aggregation). The metadata marks the column as
    # the watermarked one, as `withWatermark` does.
    windows = exploded.withColumn(
        "event_time",
        F.timestamp_millis(F.col("window_start") + (spec.window_ms - 1)).alias(
            "event_time", metadata={WATERMARK_DELAY_KEY: spec.watermark_s * 1000}
        ),
    )
    return windows.groupBy("bucket", "window_start").transformWithStateInPandas(
        WindowPacks(spec),
        outputStructType=WINDOW_OUTPUT_SCHEMA,
        outputMode="append",
        timeMode="EventTime",
    )
