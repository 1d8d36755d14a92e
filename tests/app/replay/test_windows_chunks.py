"""The replay's micro-batch files are written while Spark reads them: chained
`Trigger.AvailableNow` runs on one checkpoint, each over the files written since the last
began. The windows are those of one run over every file; a failure of the writer reaches
the caller and stops the query; a file is not read before it is published."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from balancer.app.replay.batch_files import HIDDEN_PREFIX, RAW_FILE_SCHEMA, publish, write_batches
from balancer.app.replay.windows import ClosedWindow, StreamCounts, WindowSettings, stream_windows
from balancer.core.replay.recording import RecordedMessage
from balancer.core.round_marker import MARKER_KEY
from tests.app.replay.test_windows import recording

pytestmark = pytest.mark.spark

SETTINGS = WindowSettings(
    window_s=60, slide_s=60, watermark_s=60, num_buckets=4, shuffle_partitions=2,
    max_future_skew_s=600,
)  # fmt: skip
# A guard against a hang only (the writer waits for the first window; none came): no
# assertion on time.
GUARD_S = 120


def held_after_first_round(
    messages: list[RecordedMessage], first_window: threading.Event, fail: bool = False
) -> Iterator[RecordedMessage]:
    """The messages, held after the first round marker until a window came out (so the
    first query run reads one file and the rest are written while it runs); `fail`: the
    recording's read fails there instead of going on."""
    held = False
    for message in messages:
        yield message
        if message.key == MARKER_KEY and not held:
            held = True
            if not first_window.wait(GUARD_S):
                raise AssertionError("no window while the rest was written")
            if fail:
                raise OSError("recording unreadable")


def window_rows(windows: list[ClosedWindow]) -> list[tuple[int, list[dict[str, Any]]]]:
    return [(w.end_ms, w.rows.to_pylist()) for w in windows]


def test_windows_written_in_chunks_equal_those_of_one_run(spark: Any, tmp_path: Path) -> None:
    messages = recording("arrow")
    one_run = StreamCounts()
    single = list(
        stream_windows(
            spark, messages, WindowSettings(**{**vars(SETTINGS), "first_run_files": 10**6}),
            tmp_path / "one", one_run,
        )
    )  # fmt: skip
    assert one_run.runs == 1 and one_run.files == 3

    first_window = threading.Event()
    chunked_counts = StreamCounts()
    chunked: list[ClosedWindow] = []
    stream = held_after_first_round(messages, first_window)
    for window in stream_windows(spark, stream, SETTINGS, tmp_path / "chunks", chunked_counts):
        first_window.set()
        chunked.append(window)
    assert chunked_counts.runs >= 2 and chunked_counts.files == 3
    assert len(single) >= 3
    assert window_rows(chunked) == window_rows(single)
    assert (chunked_counts.samples, chunked_counts.late, chunked_counts.marks) == (
        one_run.samples, one_run.late, one_run.marks,
    )  # fmt: skip
    assert chunked_counts.rejected == one_run.rejected
    # Every run's files deleted once it ended; none left hidden.
    assert list((tmp_path / "chunks" / "batches").iterdir()) == []


def test_a_writer_failure_midway_reaches_the_caller_and_stops_the_query(
    spark: Any, tmp_path: Path
) -> None:
    first_window = threading.Event()
    stream = held_after_first_round(recording(), first_window, fail=True)
    got: list[ClosedWindow] = []
    with pytest.raises(OSError, match="recording unreadable"):
        for window in stream_windows(spark, stream, SETTINGS, tmp_path):
            first_window.set()
            got.append(window)
    assert got  # the first run had begun: the failure came while it ran or after it
    assert not [q for q in spark.streams.active]


def test_a_file_is_not_read_before_it_is_published(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    written: list[Any] = []
    directory = tmp_path / "batches"
    write_batches(
        recording(), directory, records_per_batch=1_000, hidden=True, on_file=written.append
    )
    assert len(written) == 3
    assert all(f.path.name.startswith(HIDDEN_PREFIX) for f in written)

    names = iter(range(100))

    def rows() -> int:
        query = (
            spark.readStream.schema(from_arrow_schema(RAW_FILE_SCHEMA))
            .parquet(str(directory))
            .writeStream.format("memory")
            .queryName(f"published_{next(names)}")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return int(spark.table(query.name).count())

    assert rows() == 0
    sizes = publish(written[:1])
    assert sizes.files == 1 and sizes.max_file_bytes == written[0].published_path.stat().st_size
    first = sum(1 for _ in written[0].published_path.parent.glob("batch-*"))
    assert first == 1
    assert rows() == 2  # the first round: its envelope and its marker
