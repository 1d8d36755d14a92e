"""The replay's micro-batch files: the recorded messages, in order, as Parquet files of raw
rows, written by a thread while Spark reads the files already published.

A file ends after every `markers_per_batch` round markers, or at `records_per_batch`
records (`balancer.app.replay.windows`). The writer writes each file under a hidden name
(a leading `.`: Spark's file source lists no such file) and hands it over; the reader
publishes (renames in place) the files it hands a query run, so a run reads exactly the
files it was sized for. Modification times keep the order (the file source takes the
oldest first): one second apart, set before the rename, which keeps them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from balancer.core.replay.recording import RecordedMessage
from balancer.core.round_marker import MARKER_KEY, is_round_marker

# The raw rows a micro-batch file holds: the Kafka record's coordinates, its timestamp (the
# parse's clock for `timestamp_in_future`: the read task's wall clock when `run` read it was
# about that) and its value.
RAW_FILE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("value", pa.binary()),
    ]
)
ROW_GROUPS_PER_FILE = 8
HIDDEN_PREFIX = "."  # Spark's file source (InMemoryFileIndex) skips names starting with . or _

Compression = Literal["zstd", "lz4", "snappy", "none"]
COMPRESSION: Compression = "zstd"


@dataclass(frozen=True)
class BatchFiles:
    """What `write_batches` wrote (or what a query run reads: the files published for it)."""

    files: int
    max_value_bytes: int  # the largest record value: sizes the reader's batches
    max_file_bytes: int  # the largest file: sizes the reader's splits


@dataclass(frozen=True)
class BatchFile:
    """One written micro-batch file: its path (hidden until published) and its sizes."""

    path: Path
    max_value_bytes: int
    file_bytes: int

    @property
    def published_path(self) -> Path:
        return self.path.with_name(self.path.name.removeprefix(HIDDEN_PREFIX))


def publish(files: list[BatchFile]) -> BatchFiles:
    """Rename hidden files in place (Spark lists them from now on); their sizes together."""
    for file in files:
        if file.path != file.published_path:
            os.replace(file.path, file.published_path)
    return BatchFiles(
        len(files),
        max((f.max_value_bytes for f in files), default=0),
        max((f.file_bytes for f in files), default=0),
    )


def write_batches(
    messages: Iterable[RecordedMessage],
    directory: Path,
    *,
    records_per_batch: int,
    markers_per_batch: int = 1,
    compression: Compression = COMPRESSION,
    hidden: bool = False,
    on_file: Callable[[BatchFile], None] | None = None,
) -> BatchFiles:
    """Write the messages, in order, as one Parquet file per micro-batch.

    A file ends after every `markers_per_batch` round markers, or at `records_per_batch`
    records. Files are named and timed in order (the file source takes the oldest first).
    `hidden`: under a name Spark ignores (`publish` renames them); `on_file` is called with
    each file once it is whole."""
    directory.mkdir(parents=True, exist_ok=True)
    files = 0
    markers = 0
    file_max_value = 0
    max_value_bytes = 0
    max_file_bytes = 0
    rows: dict[str, list[object]] = {name: [] for name in RAW_FILE_SCHEMA.names}
    prefix = HIDDEN_PREFIX if hidden else ""

    def flush() -> None:
        nonlocal files, max_file_bytes, file_max_value
        if not rows["value"]:
            return
        path = directory / f"{prefix}batch-{files:08d}.parquet"
        # Several row groups a file: Spark splits a file among its cores by bytes, but a
        # row group is read by one task, and a file of one row group was parsed by one
        # task while the other core waited (most of a 100,000-topic batch's time).
        row_group_rows = -(-len(rows["value"]) // ROW_GROUPS_PER_FILE)
        pq.write_table(
            pa.table(rows, schema=RAW_FILE_SCHEMA), path, compression=compression,
            row_group_size=row_group_rows,
        )  # fmt: skip
        size = path.stat().st_size
        max_file_bytes = max(max_file_bytes, size)
        # The file source orders files by modification time: one second apart each.
        os.utime(path, (1_000_000_000 + files, 1_000_000_000 + files))
        files += 1
        for column in rows.values():
            column.clear()
        if on_file is not None:
            on_file(BatchFile(path, file_max_value, size))
        file_max_value = 0

    for message in messages:
        rows["partition"].append(message.partition)
        rows["offset"].append(message.offset)
        rows["timestamp_ms"].append(message.timestamp_ms)
        rows["value"].append(message.value)
        file_max_value = max(file_max_value, len(message.value))
        max_value_bytes = max(max_value_bytes, file_max_value)
        if message.key == MARKER_KEY or is_round_marker(message.value):
            markers += 1
        if markers >= markers_per_batch or len(rows["value"]) >= records_per_batch:
            markers = 0
            flush()
    flush()
    return BatchFiles(files, max_value_bytes, max_file_bytes)


class WriterStopped(Exception):
    """The reader stopped the writer (the caller closed the replay)."""


class BatchWriter:
    """`write_batches` in a thread, hidden files handed over as each is whole (`take`).

    A failure of the writer (the recording's read included) is raised by `take` and
    reported to `on_failure` at once (the reader stops its query run with it)."""

    def __init__(
        self,
        messages: Iterable[RecordedMessage],
        directory: Path,
        *,
        records_per_batch: int,
        markers_per_batch: int,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._messages = messages
        self._directory = directory
        self._records_per_batch = records_per_batch
        self._markers_per_batch = markers_per_batch
        self._on_failure = on_failure
        self._ready: list[BatchFile] = []
        self._done = False
        self._failure: BaseException | None = None
        self._stopping = threading.Event()
        self._changed = threading.Condition()
        self.write_s = 0.0  # the thread's time writing (reading the recording included)
        self.write_cpu_s = 0.0  # of it, the thread's CPU (the rest: waiting for a core)
        self.files = 0
        self._thread = threading.Thread(target=self._write, name="replay-files", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _until_stopped(self) -> Iterator[RecordedMessage]:
        for message in self._messages:
            if self._stopping.is_set():
                raise WriterStopped
            yield message

    def _write(self) -> None:
        started, cpu_started = time.monotonic(), time.thread_time()
        try:
            write_batches(
                self._until_stopped(), self._directory,
                records_per_batch=self._records_per_batch,
                markers_per_batch=self._markers_per_batch, hidden=True, on_file=self._add,
            )  # fmt: skip
        except WriterStopped:
            pass
        except BaseException as exc:  # raised to the reader by `take`
            with self._changed:
                self._failure = exc
            self._on_failure()
        finally:
            self.write_s = time.monotonic() - started
            self.write_cpu_s = time.thread_time() - cpu_started
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def _add(self, file: BatchFile) -> None:
        with self._changed:
            self._ready.append(file)
            self.files += 1
            self._changed.notify_all()

    def take(self, min_files: int = 1) -> list[BatchFile]:
        """Every file written and not yet taken, waiting for `min_files` of them unless the
        writer is done (empty: done, every file taken). Raises the writer's failure."""
        with self._changed:
            while len(self._ready) < min_files and not self._done:
                self._changed.wait()
            if self._failure is not None:
                raise self._failure
            ready, self._ready = self._ready, []
            return ready

    @property
    def failure(self) -> BaseException | None:
        with self._changed:
            return self._failure

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
