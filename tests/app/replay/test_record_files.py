"""A recording's Parquet files: records kept as they were, in order, across row groups and
files, and read back one batch at a time (issue 44)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from balancer.app.replay import recording_dir
from balancer.app.replay.recording_dir import read_messages, write_messages
from balancer.core.replay.recording import RecordedMessage


def messages(n: int) -> list[RecordedMessage]:
    return [
        RecordedMessage(
            partition=i % 3,
            offset=i // 3,
            timestamp_ms=1_700_000_000_000 + i,
            key=None if i % 2 else f"k{i}".encode(),
            value=b"x" * (i % 7),  # empty values too
        )
        for i in range(n)
    ]


def test_records_round_trip_across_row_groups_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_dir, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr(recording_dir, "FILE_ROWS", 10)
    written = messages(25)
    done = write_messages(tmp_path / "stats", iter(written))
    assert done.files == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert done.messages == 25
    assert (done.first_timestamp_ms, done.last_timestamp_ms) == (
        written[0].timestamp_ms,
        written[-1].timestamp_ms,
    )
    groups = [pq.ParquetFile(tmp_path / "stats" / f).num_row_groups for f in done.files]
    assert groups == [3, 3, 2]  # 4+4+2, 4+4+2, 4+1
    assert list(read_messages(tmp_path / "stats", done.files)) == written


def test_a_row_group_is_cut_by_its_bytes_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_dir, "ROW_GROUP_BYTES", 10)
    written = [
        RecordedMessage(partition=0, offset=i, timestamp_ms=i, key=None, value=b"v" * 6)
        for i in range(6)
    ]
    done = write_messages(tmp_path / "s", written)
    assert pq.ParquetFile(tmp_path / "s" / done.files[0]).num_row_groups == 3
    assert list(read_messages(tmp_path / "s", done.files)) == written


def test_reading_is_lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording_dir, "READ_BATCH_ROWS", 2)
    monkeypatch.setattr(recording_dir, "FILE_ROWS", 5)
    done = write_messages(tmp_path / "s", messages(9))
    assert len(done.files) == 2
    reader: Iterator[RecordedMessage] = read_messages(tmp_path / "s", done.files)
    assert next(reader) == messages(1)[0]
    # The second file is opened only when the first is read through: nothing read ahead.
    (tmp_path / "s" / done.files[1]).unlink()
    with pytest.raises(FileNotFoundError):
        list(reader)


def test_nothing_to_write_makes_no_file(tmp_path: Path) -> None:
    done = write_messages(tmp_path / "s", [])
    assert done.files == [] and done.messages == 0 and done.first_timestamp_ms is None
    assert list(read_messages(tmp_path / "s", done.files)) == []
