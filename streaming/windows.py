"""Event-time sliding windows per topic: the window arithmetic and the Spark stage.

The arithmetic (pure, used by the driver and the tests) is Spark's: a window of
`window_ms` sliding by `slide_ms` holds the events with `start <= t < start + window_ms`,
starts are multiples of `slide_ms`, so an event lies in `window_ms / slide_ms` windows.

The Spark stage keys the state by (window, bucket, cluster, topic): `bucket` is the
PIP-157 topic bucket, leading the topic's part of the key; namespace and hash position
(functions of the topic) are derived for each output row (crc32 of the UTF-8 name, as
Pulsar does). Spark hashes the whole key to place state, which spreads a namespace with
millions of topics evenly; an optional repartition by bucket before the partial
aggregation makes the bucket alone decide which task aggregates a topic (a full shuffle of
the events: see docs/pipeline.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming.schema import LATEST_COLUMNS, RATE_COLUMNS, RowKind


class WindowConfigError(ValueError):
    """Window, slide and watermark lengths that do not fit together."""


@dataclass(frozen=True, slots=True)
class WindowSpec:
    window_s: int = 300
    slide_s: int = 60
    watermark_s: int = 120

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.slide_s <= 0 or self.watermark_s < 0:
            raise WindowConfigError("window_s and slide_s must be > 0, watermark_s >= 0")
        if self.window_s % self.slide_s:
            raise WindowConfigError(
                f"window_s ({self.window_s}) must be a multiple of slide_s ({self.slide_s})"
            )

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


# Output columns of the window stage, in order (what foreachBatch receives).
WINDOW_COLUMNS = (
    "window_start",
    "window_end",
    "bucket",
    "cluster",
    "namespace",
    "topic",
    "position",
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
    "storage_size",
    "backlog_size",
    "offloaded_storage_size",
    "producer_count",
    "consumer_count",
    "samples",
)




def namespace_of_topic(topic: Column) -> Column:
    """`tenant/namespace` of a full topic name (`domain://tenant/namespace/local`)."""
    return F.regexp_extract(topic, r"^[^:/]+://([^/]+/[^/]+)/", 1)


def topic_windows(
    parsed: DataFrame, spec: WindowSpec, *, partitions: int, repartition_by_bucket: bool = False
) -> DataFrame:
    """Per topic and window: average rates, latest sizes and session counts, sample count.

    `parsed` is the source's output (all row kinds); only events are aggregated. Append
    mode: a window's rows come out once, all together, when the watermark passes its end.
    The newest sample's values come from `max_by(column, event_time)`: primitive buffers keep
    Spark on hash aggregation (a struct max would fall back to sort aggregation). Two samples
    of one topic with the same millisecond are a tie resolved by arrival order.
    `repartition_by_bucket` shuffles the events by PIP-157 bucket before the partial
    aggregation (costs a shuffle of every event; see docs/pipeline.md).
    """
    events = parsed.filter(F.col("kind") == int(RowKind.EVENT))
    if repartition_by_bucket:
        events = events.repartition(partitions, "bucket")
    events = events.withWatermark("event_time", f"{spec.watermark_s} seconds")
    window = F.window("event_time", f"{spec.window_s} seconds", f"{spec.slide_s} seconds")
    return (
        # namespace and position depend on the topic alone: kept out of the key (a narrower
        # key is hashed, shuffled and stored for every event) and derived per output row.
        events.groupBy(window.alias("window"), "bucket", "cluster", "topic")
        .agg(
            *(F.sum(c).alias(c) for c in RATE_COLUMNS),
            *(F.max_by(c, "event_time").alias(c) for c in LATEST_COLUMNS),
            F.count(F.lit(1)).alias("samples"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "bucket",
            "cluster",
            namespace_of_topic(F.col("topic")).alias("namespace"),
            "topic",
            F.crc32(F.col("topic").cast("binary")).alias("position"),
            *((F.col(c) / F.col("samples")).alias(c) for c in RATE_COLUMNS),
            *LATEST_COLUMNS,
            "samples",
        )
    )
