"""The window stage on real Spark: every closed (topic, window) exactly once, late packs dropped.

The stage keeps event packs per (bucket, window) in Spark's state store
(transformWithStateInPandas) and aggregates them when the watermark closes the window. Here
every closed-window row of every batch is collected (not only the newest window the driver
reports) and compared with a plain-Python computation over the same events.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from balancer.core.buckets import topic_bucket
from streaming.shared.packing import decode_windows
from streaming.spark.job import StreamSettings, build_pipeline
from streaming.stage.closing import NEWEST_WINDOW_ONLY_PROPERTY
from streaming.stage.state_cache import STATS_ENV
from tests.kafka_broker import Broker
from tests.stream_events import BASE_MS, encode, event, expected_windows, local_settings

WINDOW_MS, SLIDE_MS, WATERMARK_MS = 180_000, 60_000, 60_000
TOPICS = [f"persistent://t/ns/topic-{i}" for i in range(6)]


def minutes(first: int, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        event(topic, BASE_MS + k * 60_000 + rng.randrange(60_000), rate_in=rng.uniform(0, 100),
              storage=rng.randrange(10**9), producers=rng.randrange(5))
        for k in range(first, first + count)
        for topic in TOPICS
    ]  # fmt: skip


def run(
    spark: Any, settings: StreamSettings, closed: list[pa.Table], *, newest_only: bool = False
) -> None:
    """Runs the stage on what Kafka holds; `closed` gets each batch's rows (CLOSED_ARROW_SCHEMA).
    `newest_only`: as the driver's BatchProcessor, which reads each batch's newest window."""

    def collect(batch: Any, batch_id: int) -> None:
        context = batch.sparkSession.sparkContext
        if newest_only:
            context.setLocalProperty(NEWEST_WINDOW_ONLY_PROPERTY, "true")
        try:
            closed.append(batch.toArrow())
        finally:
            context.setLocalProperty(NEWEST_WINDOW_ONLY_PROPERTY, None)

    query = (
        build_pipeline(spark, settings)
        .writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", settings.checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None


@pytest.fixture(scope="module")
def copies_log(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The log of the stage's local copies of its lists (`streaming.stage.state_cache`) while
    the module's streams run: Python functions made from now on carry it to the workers."""
    log = tmp_path_factory.mktemp("copies") / "copies.log"
    environment = spark.sparkContext.environment
    environment[STATS_ENV] = str(log)
    try:
        yield log
    finally:
        del environment[STATS_ENV]


@pytest.fixture(scope="module")
def closed_windows(
    kafka: Broker, spark: Any, tmp_path_factory: pytest.TempPathFactory, copies_log: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    work: Path = tmp_path_factory.mktemp("window-stage")
    # One partition: events arrive in event-time order, so only the planted event is late
    # (a batch may read one partition further ahead in event time than another).
    topic = kafka.new_topic(partitions=1, prefix="stats")
    settings = local_settings(
        kafka.bootstrap_servers,
        topic,
        work,
        num_buckets=3,
        max_offsets_per_trigger=10,  # many batches: windows fill across batches
        window_s=WINDOW_MS // 1000,
        slide_s=SLIDE_MS // 1000,
        watermark_s=WATERMARK_MS // 1000,
    )
    first, second = minutes(0, 8, seed=1), minutes(8, 4, seed=2)
    # Late: its windows all closed in the first run (the watermark is past minute 6 by then).
    late = [event(TOPICS[0], BASE_MS + 30_000, rate_in=1e9)]
    closed: list[pa.Table] = []
    kafka.produce(topic, [encode(e) for e in first])
    run(spark, settings, closed)
    kafka.produce(topic, [encode(e) for e in [*late, PARTLY_LATE, *second]])
    run(spark, settings, closed)
    payloads = [payload for batch in closed for payload in batch.column("payload").to_pylist()]
    return decode_windows(payloads).to_pylist(), first + second


@pytest.fixture(scope="module")
def newest_only_batches(
    kafka: Broker, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> list[pa.Table]:
    """The stage's rows per batch when the driver reads only each batch's newest window:
    batches of five minutes of stats, so a bucket closes several windows in one."""
    work: Path = tmp_path_factory.mktemp("window-stage-newest")
    topic = kafka.new_topic(partitions=1, prefix="stats")
    settings = local_settings(
        kafka.bootstrap_servers, topic, work, num_buckets=3, max_offsets_per_trigger=30,
        window_s=WINDOW_MS // 1000, slide_s=SLIDE_MS // 1000, watermark_s=WATERMARK_MS // 1000,
    )  # fmt: skip
    kafka.produce(topic, [encode(e) for e in minutes(0, 12, seed=3)])
    closed: list[pa.Table] = []
    run(spark, settings, closed, newest_only=True)
    return closed


# Late for one of its three windows only: at minute 5:30 it is in the windows ending at 6, 7
# and 8 minutes; when it arrives the watermark is between 6 and 7 minutes (the newest event
# of the first run is in minute 7), so the window ending at 6 has closed without it and
# the other two must count it (its pack is stored once for both).
PARTLY_LATE = event(TOPICS[1], BASE_MS + 5 * 60_000 + 30_000, rate_in=1e6)
PARTLY_LATE_CLOSED_END_MS = BASE_MS + 6 * 60_000


def expected_with_partly_late(
    events: list[dict[str, Any]],
) -> dict[tuple[str, str, int], Any]:
    expected = expected_windows([*events, PARTLY_LATE], window_ms=WINDOW_MS, slide_ms=SLIDE_MS)
    closed_key = ("c1", TOPICS[1], PARTLY_LATE_CLOSED_END_MS)
    expected[closed_key] = expected_windows(events, window_ms=WINDOW_MS, slide_ms=SLIDE_MS)[
        closed_key
    ]
    return expected


def test_every_closed_window_comes_out_once_with_the_plain_python_values(
    closed_windows: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    rows, events = closed_windows
    keys = [(r["cluster"], r["topic"], int(r["window_end"].timestamp() * 1000)) for r in rows]
    assert len(keys) == len(set(keys)), "a window closed twice"
    expected = expected_with_partly_late(events)
    newest_event = max(e["timestamp_ms"] for e in events)
    watermark = newest_event - WATERMARK_MS
    # Every window the final watermark has passed is out (the last batch sees the watermark
    # of the one before it: windows ending within that last step may still be open).
    must_close = {k for k in expected if k[2] <= watermark - SLIDE_MS}
    assert must_close <= set(keys) <= set(expected)
    for row, key in zip(rows, keys, strict=True):
        want = expected[key]
        # the late 1e9 is absent; the partly late 1e6 is in the windows still open only
        assert row["msg_rate_in"] == pytest.approx(want.msg_rate_in)
        assert row["storage_size"] == want.storage_size
        assert row["producer_count"] == want.producer_count
        assert row["samples"] == want.samples
        assert row["namespace"] == "t/ns"


def test_a_partly_late_event_counts_in_the_windows_still_open_only(
    closed_windows: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    rows, _ = closed_windows
    rates = {
        int(r["window_end"].timestamp() * 1000): r["msg_rate_in"]
        for r in rows
        if r["topic"] == TOPICS[1]
    }
    ends = [PARTLY_LATE_CLOSED_END_MS + k * SLIDE_MS for k in range(3)]
    assert rates[ends[0]] < 100  # closed before it came: uniform(0, 100) samples only
    assert all(rates[end] > 1e6 / 4 for end in ends[1:])  # a mean of at most 4 samples


def test_closes_superseded_in_their_batch_are_heads_when_the_reader_says_so(
    newest_only_batches: list[pa.Table],
) -> None:
    events = minutes(0, 12, seed=3)
    expected = expected_windows(events, window_ms=WINDOW_MS, slide_ms=SLIDE_MS)
    heads = 0
    for batch in newest_only_batches:
        rows = batch.to_pylist()
        for bucket in {row["bucket"] for row in rows}:
            mine = [row for row in rows if row["bucket"] == bucket]
            newest_ms = max((r["window_end"] for r in mine if r["topics"]), default=None)
            for row in mine:
                if row["topics"] and row["window_end"] < newest_ms:  # superseded: a head
                    assert (row["part"], row["payload"], row["known"]) == (0, None, None)
                    assert row["namespaces"] is None
                    assert row["topics"] == sum(
                        1 for (_, topic, end) in expected
                        if end == row["window_end"] and topic_bucket(topic, 3) == bucket
                    )  # fmt: skip
                    heads += 1
                    continue
                assert row["payload"] is not None and row["known"] is not None
                for topic_row in decode_windows([row["payload"]]).to_pylist():
                    key = (topic_row["cluster"], topic_row["topic"], row["window_end"])
                    assert topic_row["msg_rate_in"] == pytest.approx(expected[key].msg_rate_in)
                    assert topic_row["samples"] == expected[key].samples
    assert heads > 0  # batches of five minutes close several windows a bucket


def test_every_list_read_takes_the_copy_the_bucket_wrote(
    closed_windows: tuple[list[dict[str, Any]], list[dict[str, Any]]], copies_log: Path
) -> None:
    """One executor, a fresh checkpoint: every list a close reads was written in this
    application, through its copy (restarts and retries: tests/streaming/test_state_cache.py)."""
    lines = [line.split() for line in copies_log.read_text().splitlines()]
    reads = [what for _, _, _, what in lines if what in ("hit", "miss")]
    assert reads and set(reads) == {"hit"}
    assert {name.split("_")[0] for _, _, name, _ in lines} == {"packs", "known"}
