"""A recording on disk, as `pulsar-balancer record` writes it (docs/decisions.md#recording-format):

    DIR/manifest.json                    what it holds (`Manifest`): the format's version,
                                         the topics, the time range, counts, partitions
    DIR/stats/part-00000.parquet ...     the stats topic's records in the recording's order
    DIR/context/part-00000.parquet ...   the context topic's records, the same way

Every Parquet file has one schema (`SCHEMA`): the Kafka record as it was, `partition`,
`offset`, `timestamp_ms`, `key` (null when none) and `value`, so a directory replays exactly
as its Kafka range does, and Spark reads the files as they are
(`spark.read.parquet("DIR/stats")`). Written with pyarrow in row groups and read back in
record batches: neither side holds more than one row group.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypedDict, cast

from balancer.core.replay.recording import RecordedMessage

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

FORMAT: Final = "pulsar-balancer-recording"
FORMAT_VERSION: Final = 1
MANIFEST: Final = "manifest.json"
STATS_DIR: Final = "stats"
CONTEXT_DIR: Final = "context"
ORDER: Final = "each partition in offset order, merged by (timestamp_ms, partition, offset)"
# A row group is written at this many rows or bytes of values, whichever comes first: an
# envelope is up to collector.envelope_max_bytes (1 MiB), so rows alone would not bound it.
ROW_GROUP_ROWS: Final = 50_000
ROW_GROUP_BYTES: Final = 64 << 20
# A file is closed at this many rows (Spark reads the files in parallel).
FILE_ROWS: Final = 2_000_000
READ_BATCH_ROWS: Final = 10_000


class TopicManifest(TypedDict):
    topic: str
    partitions: list[int]
    # partition (as a string: JSON keys) -> [first offset read, end offset] as found
    offsets: dict[str, list[int]]
    messages: int
    value_bytes: int
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    files: list[str]  # in the recording's order, under the topic's directory


class Manifest(TypedDict):
    format: str
    format_version: int
    tool_version: str
    created_ms: int
    since_ms: int | None  # the range asked for, on record timestamps: since <= t < until
    until_ms: int | None
    order: str
    stats: TopicManifest
    context: TopicManifest
    # Context records that did not parse, by reason (they are in the files all the same:
    # a replay counts and skips them as it would reading Kafka).
    contexts_read: int
    contexts_rejected: dict[str, int]


def schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp_ms", pa.int64(), nullable=False),
            pa.field("key", pa.binary(), nullable=True),
            pa.field("value", pa.binary(), nullable=False),
        ]
    )


@dataclass
class TopicWrite:
    """What one topic's write put on disk (for the manifest)."""

    messages: int = 0
    value_bytes: int = 0
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    files: list[str] = field(default_factory=list)


class _Columns:
    def __init__(self) -> None:
        self.partition: list[int] = []
        self.offset: list[int] = []
        self.timestamp_ms: list[int] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes] = []
        self.value_bytes = 0

    def add(self, message: RecordedMessage) -> None:
        self.partition.append(message.partition)
        self.offset.append(message.offset)
        self.timestamp_ms.append(message.timestamp_ms)
        self.key.append(message.key)
        self.value.append(message.value)
        self.value_bytes += len(message.value)

    def __len__(self) -> int:
        return len(self.offset)

    def table(self) -> pa.Table:
        import pyarrow as pa

        columns = [self.partition, self.offset, self.timestamp_ms, self.key, self.value]
        return pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, schema(), strict=True)],
            schema=schema(),
        )


def write_messages(directory: Path, messages: Iterable[RecordedMessage]) -> TopicWrite:
    """Write `messages` in their order to `directory/part-NNNNN.parquet` (made here)."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=False)
    done = TopicWrite()
    writer: pq.ParquetWriter | None = None
    rows_in_file = 0
    columns = _Columns()

    def flush() -> None:
        nonlocal writer, columns
        if not len(columns):
            return
        if writer is None:
            name = f"part-{len(done.files):05d}.parquet"
            writer = pq.ParquetWriter(directory / name, schema(), compression="zstd")
            done.files.append(name)
        writer.write_table(columns.table())
        columns = _Columns()

    try:
        for message in messages:
            columns.add(message)
            done.messages += 1
            done.value_bytes += len(message.value)
            if done.first_timestamp_ms is None:
                done.first_timestamp_ms = message.timestamp_ms
            done.last_timestamp_ms = message.timestamp_ms
            rows_in_file += 1
            if len(columns) >= ROW_GROUP_ROWS or columns.value_bytes >= ROW_GROUP_BYTES:
                flush()
            if rows_in_file >= FILE_ROWS:
                flush()
                if writer is not None:
                    writer.close()
                    writer = None
                rows_in_file = 0
        flush()
    finally:
        if writer is not None:
            writer.close()
    return done


def read_messages(directory: Path, files: Sequence[str]) -> Iterator[RecordedMessage]:
    """The records of `files` under `directory`, in order, one record batch at a time."""
    import pyarrow.parquet as pq

    for name in files:
        parquet = pq.ParquetFile(directory / name)
        try:
            for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS):
                rows = batch.to_pydict()
                for partition, offset, stamp, key, value in zip(
                    rows["partition"],
                    rows["offset"],
                    rows["timestamp_ms"],
                    rows["key"],
                    rows["value"],
                    strict=True,
                ):
                    yield RecordedMessage(
                        partition=int(partition),
                        offset=int(offset),
                        timestamp_ms=int(stamp),
                        key=key,
                        value=value,
                    )
        finally:
            parquet.close()


def topic_manifest(
    topic: str, ranges: Mapping[int, tuple[int, int]], write: TopicWrite
) -> TopicManifest:
    return {
        "topic": topic,
        "partitions": sorted(ranges),
        "offsets": {str(p): [start, end] for p, (start, end) in sorted(ranges.items())},
        "messages": write.messages,
        "value_bytes": write.value_bytes,
        "first_timestamp_ms": write.first_timestamp_ms,
        "last_timestamp_ms": write.last_timestamp_ms,
        "files": list(write.files),
    }


def write_manifest(directory: Path, manifest: Manifest) -> None:
    path = directory / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with open(path, "rb") as handle:  # on disk before the directory is renamed into place
        os.fsync(handle.fileno())


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a recording directory; ValueError (one line) when it is not one."""
    path = directory / MANIFEST
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"{directory}: no {MANIFEST} (not a recording written by `record`)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} manifest")
    if obj.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format version {obj.get('format_version')!r}; this pulsar-balancer "
            f"reads version {FORMAT_VERSION}"
        )
    for kind, sub in ((STATS_DIR, "stats"), (CONTEXT_DIR, "context")):
        topic = obj.get(sub)
        files = topic.get("files") if isinstance(topic, dict) else None
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError(f"{path}: {sub}.files must be a list of file names")
        for name in files:
            if "/" in name or name.startswith(".") or not (directory / kind / name).is_file():
                raise ValueError(f"{path}: {kind}/{name} is missing")
    return cast(Manifest, obj)
