"""Event-time sliding windows per topic: the window arithmetic and the Spark stage.

The arithmetic (pure, used by the driver and the tests) is Spark's: a window of
`window_ms` sliding by `slide_ms` holds the events with `start <= t < start + window_ms`,
starts are multiples of `slide_ms`, so an event lies in `window_ms / slide_ms` windows.

The Spark stage works on event packs (`streaming.shared.packing`): one row per (PIP-157 bucket,
pane) from each read task. A pack goes to every window holding its pane that has not closed
(a row each, for Spark's late-row rule) but is stored once. The state is kept per bucket
(`transformWithStateInPandas`, RocksDB): its open windows' packs and its known topics.
When the watermark passes a window's end (a collector's round marker moves it at once,
`topic_windows`), its packs are aggregated into one row per topic
and the window leaves the stage with the bucket's known topics (`streaming.stage.closing`), so
the roll-up to bundles can run on the executors too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark import TaskContext
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
    LongType,
    StructField,
    StructType,
)

from balancer.core.window_rules import WindowRuleError, check_windows
from streaming.shared.packing import PACK_SCHEMA, aggregate_window, decode
from streaming.shared.schema import CLOSED_SPARK_SCHEMA, RowKind
from streaming.stage.closing import (
    CLOSE_PART_ROWS,
    KNOWN_SCHEMA,
    KNOWN_TTL_WINDOWS,
    NEWEST_WINDOW_ONLY_PROPERTY,
    BucketCloses,
    PartialsOf,
    known_chunks,
    known_of,
)
from streaming.stage.partials import STAGE_LAYOUTS_PROPERTY, StageLayouts, stage_roll_up
from streaming.stage.routing import bucket_of_route, bucket_routes
from streaming.stage.state_cache import CachedList, LocalCopies

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


def late_events(pane_events: Mapping[int, int], watermark_ms: int, spec: WindowSpec) -> int:
    """Events (pane start -> count) that missed a window because it had already closed.

    Spark drops an event from every window whose end is <= the watermark; an event is late
    when the first of its windows was already closed. An event's pane decides its first
    window, so any time in the pane (an event time too) gives the same verdict. Pure.
    """
    if watermark_ms <= 0:
        return 0
    return sum(n for t, n in pane_events.items() if first_window_end_ms(t, spec) <= watermark_ms)


# A pack waiting for its windows, in the bucket's list of packs (arrival order), stored once
# for every window holding its pane. Its event count also gives the list a layout Spark tells
# apart from the per-window packs of checkpoints before 2026-11-24 (same field types: Spark
# would read those as panes and count their packs twice); it refuses them instead.
PACK_STATE_SCHEMA = StructType(
    [
        StructField("pane_start", LongType()),
        StructField("events", LongType()),
        StructField("payload", BinaryType()),
    ]
)
# A stored pack as the stage holds it: (pane start, events, payload).
PackRow = tuple[int, int, bytes]
PAYLOAD_SCHEMA = StructType([StructField("payload", BinaryType())])
CLOSED_THROUGH_SCHEMA = StructType([StructField("end_ms", LongType())])

WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey


class WindowPacks(StatefulProcessor):  # type: ignore[misc]  # pyspark is untyped here
    """The state of one PIP-157 bucket: its open windows' packs and its known topics.

    New packs are appended to the bucket's lists (one state call per list and batch), each
    once with its pane, with an event-time timer at the end of each of its windows that
    Spark did not drop as late. When the watermark
    reaches a window's end (Spark fires a key's timers oldest first, after the batch's new
    rows), the window's packs are aggregated into one row per topic, removed, and the window
    leaves the stage with the bucket's known topics (`streaming.stage.closing.BucketCloses`).
    While the bucket knows topics, it closes every later window too, packs or not. Spark
    itself drops the packs of windows that had closed before the batch (late events,
    counted by the driver with the same rule: `late_events`).
    """

    def __init__(self, spec: WindowSpec, *, known_ttl_ms: int, num_buckets: int) -> None:
        # the stage's key is the bucket's route (streaming.stage.routing)
        self.num_buckets = num_buckets
        self.window_ms = spec.window_ms
        self.slide_ms = spec.slide_ms
        self.known_ttl_ms = known_ttl_ms
        self.pack_slots = spec.window_ms // spec.slide_ms + 2
        self._stage_text: str | None = None
        self._partials: PartialsOf | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        # A pane's packs go to list (pane start / slide) mod K: a close reads about one
        # window's packs, its panes' lists (a single list would hold every open window's:
        # ~135 MB per bucket at 10M topics, more than the state server could send).
        # The lists are read from local copies where current (`streaming.stage.state_cache`):
        # most of what a close reads, the bucket wrote a batch before.
        copies = LocalCopies.of_executor()
        self.pack_lists = [
            CachedList(handle, f"packs_{i}", PACK_STATE_SCHEMA, copies)
            for i in range(self.pack_slots)
        ]
        # The end of the newest window this bucket closed.
        self.closed_through = handle.getValueState("closed_through", CLOSED_THROUGH_SCHEMA)
        self.known = CachedList(handle, "known", PAYLOAD_SCHEMA, copies)

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        # A pack comes as one row per window holding its pane, less those Spark dropped as
        # late, with its payload on the row of its last window only (`topic_windows`). The
        # windows of the rows get timers. A window dropped as late never closes after this
        # batch (it closed before, or has no timer: the rule depends on the window only),
        # so a stored pack counts for every window of its pane that closes later.
        route = int(key[0])
        starts: set[int] = set()
        by_slot: dict[int, list[tuple[int, int, bytes]]] = {}
        for frame in rows:
            starts.update(frame["window_start"].tolist())
            carried = frame[frame["payload"].notna()]
            for pane, events, payload in zip(
                carried["pane_start"].tolist(),
                carried["events"].tolist(),
                carried["payload"],
                strict=True,
            ):
                by_slot.setdefault(self._slot(pane), []).append((pane, events, bytes(payload)))
        for slot, stored in by_slot.items():
            self.pack_lists[slot].append(route, stored)
        self._set_timers(start + self.window_ms - 1 for start in starts)
        return iter(())

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        # Spark removes the expired timer itself. The bucket's first timer of a batch closes
        # every window the watermark has passed, oldest first; its later timers of the batch
        # find theirs closed.
        first_end_ms = int(expiredTimerInfo.getExpiryTimeInMs()) + 1
        closed_through_ms = int(self.closed_through.get()[0]) if self.closed_through.exists() else 0
        if first_end_ms <= closed_through_ms:
            return
        watermark_ms = int(timerValues.getCurrentWatermarkInMs())
        route = int(key[0])
        bucket = bucket_of_route(route, self.num_buckets)
        # Every window with packs has a timer: those the watermark has passed are due.
        due = sorted(int(t) + 1 for t in self.handle.listTimers() if int(t) <= watermark_ms)
        # A list's `get` answers an absent list with no values: no `exists` first (in RocksDB
        # that reads the whole list once more).
        known_payloads = [bytes(p) for (p,) in self.known.get(route)]
        stored = known_of(known_payloads) if known_payloads else None
        known = stored if stored is not None else KNOWN_SCHEMA.empty_table()
        context = TaskContext.get()
        closes = BucketCloses(
            bucket=bucket, ttl_ms=self.known_ttl_ms, part_rows=CLOSE_PART_ROWS,
            partials_of=self._partials_of(context),
            newest_only=_property(context, NEWEST_WINDOW_ONLY_PROPERTY) == "true",
        )  # fmt: skip
        lists: dict[int, list[PackRow]] = {}  # the pack lists read, by slot
        read: dict[int, int] = {}  # how many packs each list held when read
        decoded: dict[int, pa.Table] = {}  # the events of each pane read, by pane start
        end_ms: int | None = first_end_ms
        while end_ms is not None:
            start_ms = end_ms - self.window_ms
            window = aggregate_window(
                self._window_events(route, start_ms, lists, read, decoded),
                bucket=bucket,
                window_start_ms=start_ms,
                window_end_ms=end_ms,
            )
            known = closes.close(window, known, start_ms=start_ms, end_ms=end_ms)
            closed_through_ms = end_ms
            end_ms = self._next_close(end_ms, due, bool(known.num_rows), watermark_ms)
        self.closed_through.update((closed_through_ms,))
        for slot, rest in lists.items():  # what stays: packs of later windows
            if len(rest) != read[slot]:  # else unchanged
                self.pack_lists[slot].put(route, rest)  # none left: cleared
        if known.num_rows:
            self.known.put(route, [(chunk,) for chunk in known_chunks(known)])
            self._set_timers([closed_through_ms + self.slide_ms - 1])
        elif stored is not None:
            self.known.put(route, [])
        rows = [part.to_row() for part in closes.finish()]
        yield pd.DataFrame({name: [row[name] for row in rows] for name in rows[0]})

    def _partials_of(self, context: TaskContext | None) -> PartialsOf | None:
        """The roll-up of a close with the layouts the driver gave this batch's job, if any
        (`streaming.stage.partials.StageLayouts`: then the driver needs no job for the partials)."""
        text = _property(context, STAGE_LAYOUTS_PROPERTY)
        if not text:
            return None
        if text != self._stage_text:  # parsed once per batch and task, not per close
            self._stage_text, self._partials = text, stage_roll_up(StageLayouts.from_text(text))
        return self._partials

    def _next_close(
        self, end_ms: int, due: list[int], knows_topics: bool, watermark_ms: int
    ) -> int | None:
        """The window to close after the one ending at `end_ms` in this batch, if any.

        The next window with packs that the watermark has passed; while the bucket knows
        topics, every window in between too (a fill-in: its known topics count toward that
        window's completeness). Those are closed here, not by a timer: a timer registered
        while Spark fires timers may fire only in the next batch.
        """
        later = [d for d in due if d > end_ms]
        fill = end_ms + self.slide_ms
        if knows_topics and fill - 1 <= watermark_ms:
            return min([fill, *later])
        return later[0] if later else None

    def _set_timers(self, expiry_ms: Iterable[int]) -> None:
        """Registers each timer not registered yet (Spark warns on a duplicate)."""
        registered = {int(t) for t in self.handle.listTimers()}
        for t in set(expiry_ms) - registered:
            self.handle.registerTimer(t)

    def _slot(self, pane_start_ms: int) -> int:
        return (pane_start_ms // self.slide_ms) % self.pack_slots

    def _window_events(
        self,
        route: int,
        start_ms: int,
        lists: dict[int, list[PackRow]],
        read: dict[int, int],
        decoded: dict[int, pa.Table],
    ) -> pa.Table:
        """The events (PACK_SCHEMA) of the window starting at `start_ms`, pane by pane in
        arrival order, from the lists of its panes in `lists` (each read from the state once
        per call of the timer).

        A pane's packs are decoded once per call (`decoded`): in a backlog a bucket closes
        many windows in a row, and each pane belongs to window / slide of them. Packs whose
        last window this is are taken out (the caller writes back the lists that changed),
        and so is their pane's decoded table.
        """
        tables: list[pa.Table] = []
        for pane in range(start_ms, start_ms + self.window_ms, self.slide_ms):
            slot = self._slot(pane)
            if slot not in lists:  # none when absent (see handleExpiredTimer)
                lists[slot] = self.pack_lists[slot].get(route)  # type: ignore[assignment]
                read[slot] = len(lists[slot])
            if pane not in decoded:
                payloads = [payload for p, _, payload in lists[slot] if p == pane]
                decoded[pane] = decode(payloads, PACK_SCHEMA)
            tables.append(decoded[pane])
            if pane == start_ms:  # the last window of this pane's packs
                lists[slot] = [pack for pack in lists[slot] if pack[0] > start_ms]
                del decoded[pane]
        return pa.concat_tables(tables)


def _property(context: TaskContext | None, name: str) -> str | None:
    """A local property of the job running the task (what the driver set for this batch)."""
    return None if context is None else context.getLocalProperty(name)


def topic_windows(
    parsed: DataFrame, spec: WindowSpec, *, num_buckets: int, shuffle_partitions: int
) -> DataFrame:
    """Closed windows, one row per part of a closed (bucket, window)
    (`streaming.stage.closing.ClosedWindow`).

    `parsed` is the source's output (all row kinds); only packs are windowed. Each pack
    belongs to the `window / slide` windows holding its pane; the state of a bucket is its
    open windows' packs and its known topics, kept in Spark's state store (checkpointed with
    the offsets) under the bucket's route, which puts bucket `b` on shuffle partition
    `b mod shuffle_partitions` (`streaming.stage.routing`). Append mode: a window comes out once,
    when the watermark passes its end.
    """
    panes_per_window = spec.window_ms // spec.slide_ms
    routes = F.array(
        *(F.lit(r).cast("long") for r in bucket_routes(num_buckets, shuffle_partitions))
    )
    # A round marker (`RowKind.MARK`) promises no event before its time: stamped that
    # time plus the lateness, it moves the watermark to it, and every window ending by then
    # closes in the next batch (docs/pipeline.md#when-a-window-closes). It holds no window.
    is_pack = F.col("kind") == int(RowKind.PACK)
    marked = F.col("event_time") + F.expr(f"INTERVAL {spec.watermark_s} SECONDS")
    packs = (
        parsed.filter(F.col("kind").isin(int(RowKind.PACK), int(RowKind.MARK)))
        .withColumn("event_time", F.when(is_pack, F.col("event_time")).otherwise(marked))
        .withWatermark("event_time", f"{spec.watermark_s} seconds")
    )
    # `explode_outer` and a filter, not `explode`: for an inner explode Spark infers a
    # filter on the array (not null, not empty) and pushes it below the watermark, where it
    # would drop the marks before they move the watermark.
    exploded = packs.select(
        F.element_at(routes, F.col("bucket") + 1).alias("route"),
        "pane_start",
        "events",
        F.explode_outer(  # a mark's sequence is null: one row with no window, dropped below
            F.when(
                is_pack,
                F.sequence(
                    F.col("pane_start") - (panes_per_window - 1) * spec.slide_ms,
                    F.col("pane_start"),
                    F.lit(spec.slide_ms).cast("long"),
                ),
            )
        ).alias("window_start"),
        "payload",
    ).filter(F.col("window_start").isNotNull())
    # Spark drops a grouped row older than the watermark: the row's event time is its
    # window's last millisecond, so a pack is dropped from exactly the windows that have
    # closed (Spark's rule for a windowed aggregation). The metadata marks the column as
    # the watermarked one, as `withWatermark` does.
    windows = exploded.withColumn(
        "event_time",
        F.timestamp_millis(F.col("window_start") + (spec.window_ms - 1)).alias(
            "event_time", metadata={WATERMARK_DELAY_KEY: spec.watermark_s * 1000}
        ),
    ).withColumn(
        # The payload travels once, on the row of the pack's last window: if that one is
        # late, so are all (they end earlier). The other rows only give the stage the
        # windows that are not late (their timers), so the state holds each pack once.
        "payload",
        F.when(F.col("window_start") == F.col("pane_start"), F.col("payload")),
    )
    return windows.groupBy("route").transformWithStateInPandas(
        WindowPacks(spec, known_ttl_ms=KNOWN_TTL_WINDOWS * spec.window_ms, num_buckets=num_buckets),
        outputStructType=CLOSED_SPARK_SCHEMA,  # what foreachBatch receives
        outputMode="append",
        timeMode="EventTime",
    )
