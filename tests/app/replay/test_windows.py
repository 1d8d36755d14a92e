"""The replay's windows come from the stream's own code in batch (Spark), closed as `run`
closes them: a hand computation on a small recording with markers, a late sample, a gap and
a bad record."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from balancer.app.replay.batch_files import ROW_GROUPS_PER_FILE, write_batches
from balancer.app.replay.windows import (
    READER_BATCH_BYTES,
    StreamCounts,
    WindowSettings,
    reader_batch_rows,
    split_bytes,
    stream_windows,
)
from balancer.core.arrow_envelope import encode_envelope, is_arrow_envelope
from balancer.core.envelopes import EnvelopeFormat
from balancer.core.events import TopicStatsEvent, validate_event
from balancer.core.replay.recording import RecordedMessage
from balancer.core.round_marker import MARKER_KEY, encode_round_marker
from tests.stream_events import BASE_MS, event

pytestmark = pytest.mark.spark

NS = "t/ns"
A = f"persistent://{NS}/a"
B = f"persistent://{NS}/b"
MIN = 60_000


class Recorder:
    def __init__(self, envelope_format: EnvelopeFormat = "json") -> None:
        self.messages: list[RecordedMessage] = []
        self.envelope_format = envelope_format

    def add(self, value: bytes, key: bytes | None, at_ms: int) -> None:
        offset = len(self.messages)
        self.messages.append(RecordedMessage(0, offset, at_ms, key, value))

    def envelope(self, *events: dict[str, Any]) -> None:
        at_ms = max(e["timestamp_ms"] for e in events) + 500
        if self.envelope_format == "arrow":  # as the collector sends them by default
            typed = [validate_event(e) for e in events]
            assert all(isinstance(e, TopicStatsEvent) for e in typed)
            value = encode_envelope([e for e in typed if isinstance(e, TopicStatsEvent)])
        else:
            value = json.dumps({"events": list(events)}).encode()
        self.add(value, NS.encode(), at_ms)

    def single(self, e: dict[str, Any]) -> None:
        self.add(json.dumps(e).encode(), e["topic"].encode(), e["timestamp_ms"] + 500)

    def marker(self, until_ms: int) -> None:
        self.add(encode_round_marker(until_ms), MARKER_KEY, until_ms - 1000)


def recording(envelope_format: EnvelopeFormat = "json") -> list[RecordedMessage]:
    r = Recorder(envelope_format)
    # round 0: both topics, then its marker
    r.envelope(event(A, BASE_MS + 1_000, rate_in=1.0), event(B, BASE_MS + 1_000, rate_in=2.0))
    r.marker(BASE_MS + MIN)
    # round 1: a as a single-event message, b in an envelope, a bad record
    r.single(event(A, BASE_MS + MIN + 1_000, rate_in=3.0, storage=7))
    r.envelope(event(B, BASE_MS + MIN + 1_000, rate_in=5.0))
    r.add(b"not json", b"x", BASE_MS + MIN + 2_000)
    r.marker(BASE_MS + 2 * MIN)
    # a sample of round 0 arrives after the marker of round 1 closed its window: late
    r.single(event(A, BASE_MS + 30_000, rate_in=100.0))
    # round 2 is missing (the collector was down): a gap; round 3 has a only
    r.envelope(event(A, BASE_MS + 3 * MIN + 1_000, rate_in=7.0, producers=4))
    r.marker(BASE_MS + 4 * MIN)
    return r.messages


# Arrow: a recording of the collector's default envelopes (single events stay JSON, so the
# recording mixes both formats, as a topic does during an upgrade).
@pytest.mark.parametrize("envelope_format", ["json", "arrow"])
def test_windows_equal_a_hand_computation(
    spark: Any, tmp_path: Path, envelope_format: EnvelopeFormat
) -> None:
    settings = WindowSettings(
        window_s=60, slide_s=60, watermark_s=60, num_buckets=4, shuffle_partitions=2,
        max_future_skew_s=600,
    )  # fmt: skip
    counts = StreamCounts()
    messages = recording(envelope_format)
    assert sum(is_arrow_envelope(m.value) for m in messages) == (
        3 if envelope_format == "arrow" else 0
    )
    windows = list(stream_windows(spark, messages, settings, tmp_path, counts))
    got = {w.end_ms: {load.topic: load for _, _, load in w.topic_loads()} for w in windows}
    ends = [w.end_ms for w in windows]
    assert ends == sorted(ends)
    assert BASE_MS + MIN in got and BASE_MS + 2 * MIN in got and BASE_MS + 4 * MIN in got
    # window 0: one sample each, the late one not counted
    w0 = got[BASE_MS + MIN]
    assert w0[A].msg_rate_in == 1.0  # not (1 + 100) / 2
    assert w0[B].msg_rate_in == 2.0
    w1 = got[BASE_MS + 2 * MIN]
    assert (w1[A].msg_rate_in, w1[A].storage_size) == (3.0, 7)
    assert w1[B].msg_rate_in == 5.0
    # the gap: the window of the missing round closes with no topic (known topics only)
    assert got.get(BASE_MS + 3 * MIN, {}) == {}
    w3 = got[BASE_MS + 4 * MIN]
    assert set(w3) == {A}
    assert (w3[A].msg_rate_in, w3[A].producer_count) == (7.0, 4)
    assert counts.samples == 6 and counts.late == 1 and counts.marks == 3
    assert sum(counts.rejected.values()) == 1, counts.rejected


def test_the_stage_rolls_the_closes_up_with_the_layouts_given_as_a_batch_starts(
    spark: Any, tmp_path: Path
) -> None:
    """As `run`'s stage: the layouts asked for as each micro-batch starts are those its
    closes are rolled up with (the `partials` column), and those partials are the ones the
    driver would compute itself with them."""
    from balancer.app.replay.ours import MemoryClosedWindows
    from balancer.core.bundles import NamespaceBundles
    from streaming.stage.partials import StageLayouts

    layouts = {("c1", NS): NamespaceBundles.initial(NS, 4)}
    stage = StageLayouts(layouts, None)
    asked: list[int] = []

    def stage_layouts() -> StageLayouts:
        asked.append(1)
        return stage

    settings = WindowSettings(
        window_s=60, slide_s=60, watermark_s=60, num_buckets=4, shuffle_partitions=2,
        max_future_skew_s=600,
    )  # fmt: skip
    windows = list(
        stream_windows(spark, recording(), settings, tmp_path, stage_layouts=stage_layouts)
    )
    with_topics = [w for w in windows if w.topics]
    assert with_topics and asked
    for w in with_topics:
        assert w.stage_layouts is stage
        closed = MemoryClosedWindows(w.rows, w.stage_layouts)
        from_stage = closed.stage_partials(w.end_ms, layouts, None)
        assert from_stage is not None, w.end_ms
        computed = closed.partials(w.end_ms, layouts, None)
        keys = ["cluster", "namespace", "lower", "bucket"]
        order = [(k, "ascending") for k in keys if k in computed.column_names]
        assert from_stage.sort_by(order).to_pylist() == computed.sort_by(order).to_pylist()


def test_reader_batches_hold_at_most_its_bytes_of_the_largest_value() -> None:
    # 40 KiB envelopes x 4,096 rows asked Spark's reader for 170 MB at once (OOM).
    assert reader_batch_rows(40 << 10) == READER_BATCH_BYTES // (40 << 10) < 4096
    assert reader_batch_rows(100) == 4096  # Spark's own default, at most
    assert reader_batch_rows(READER_BATCH_BYTES * 2) == 1
    assert reader_batch_rows(0) == 4096


def test_windows_are_the_same_read_a_record_a_reader_batch(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import balancer.app.replay.windows as windows_module

    settings = WindowSettings(
        window_s=60, slide_s=60, watermark_s=60, num_buckets=4, shuffle_partitions=2,
        max_future_skew_s=600,
    )  # fmt: skip
    messages = recording("arrow")
    expected = {
        w.end_ms: sorted((load.topic, load.msg_rate_in) for _, _, load in w.topic_loads())
        for w in stream_windows(spark, messages, settings, tmp_path / "a")
    }
    monkeypatch.setattr(windows_module, "READER_BATCH_BYTES", 1)
    try:
        got = {
            w.end_ms: sorted((load.topic, load.msg_rate_in) for _, _, load in w.topic_loads())
            for w in stream_windows(spark, messages, settings, tmp_path / "b")
        }
        assert spark.conf.get("spark.sql.parquet.columnarReaderBatchSize") == "1"
    finally:  # the session is shared by the other Spark tests
        spark.conf.unset("spark.sql.parquet.columnarReaderBatchSize")
    assert got == expected and len(got) >= 3


def test_a_batch_file_is_read_by_every_core(spark: Any, tmp_path: Path) -> None:
    # One batch's file of ~2 MiB: 8 row groups, and splits that give each core some.
    rng = random.Random(7)
    messages = [RecordedMessage(0, i, BASE_MS, None, rng.randbytes(20_000)) for i in range(100)]
    written = write_batches(messages, tmp_path / "b", records_per_batch=1_000)
    (path,) = (tmp_path / "b").iterdir()
    assert written.files == 1 and written.max_file_bytes == path.stat().st_size
    assert pq.ParquetFile(path).num_row_groups == ROW_GROUPS_PER_FILE
    cores = spark.sparkContext.defaultParallelism
    assert cores >= 2
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes(written, cores)))
    try:
        rows = spark.read.parquet(str(path)).select("offset").rdd
        per_split = rows.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert len(per_split) == cores and min(per_split) > 0 and sum(per_split) == 100
