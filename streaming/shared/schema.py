"""Row layouts of the stream: what the Kafka source emits and what the window stage outputs.

One list of columns per layout gives both the Arrow schema (what the Python reader yields)
and the Spark schema (what the planner sees), so the two cannot drift apart.

The source emits three kinds of rows in one stream (column `kind`):
- `PACK`: validated topic-stats events of one PIP-157 bucket and one pane (a slide of event
  time), as an Arrow payload (`streaming.shared.packing`);
- `REJECT`: a message or envelope entry that failed validation: the original bytes, the
  reason, a detail and its Kafka partition/offset, for the dead-letter sink;
- `SUMMARY`: one per Kafka partition range read, with the counts and the event-time
  histogram the job needs to report consumption, rejects by reason, late events and lag;
- `MARK`: a collector's round marker (`balancer.core.round_marker`): `event_time` is its
  `until_ms`, the time before which no event will follow; it moves the watermark only.

The window stage emits one row per part of a closed (bucket, window): `CLOSED_COLUMNS`
(`streaming.stage.closing.ClosedWindow`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


class RowKind(IntEnum):
    PACK = 0
    REJECT = 1
    SUMMARY = 2
    MARK = 3


_Column = tuple[str, pa.DataType, DataType]

# Kafka coordinates of a raw record: the same columns whichever reader produced them
# (our Python source in raw mode, or Spark's native `kafka` format after a projection).
RAW_COLUMNS: Final[tuple[_Column, ...]] = (
    ("partition", pa.int32(), IntegerType()),
    ("offset", pa.int64(), LongType()),
    ("value", pa.binary(), BinaryType()),
)

PARSED_COLUMNS: Final[tuple[_Column, ...]] = (
    ("kind", pa.int32(), IntegerType()),
    # pack columns (null on other kinds): the events of one bucket and pane, see
    # streaming.shared.packing
    ("bucket", pa.int32(), IntegerType()),  # PIP-157 topic bucket
    # newest event of the pack (a mark: its until_ms)
    ("event_time", pa.timestamp("us", tz="UTC"), TimestampType()),
    ("pane_start", pa.int64(), LongType()),  # epoch ms
    ("events", pa.int64(), LongType()),
    ("payload", pa.binary(), BinaryType()),  # Arrow IPC, streaming.shared.packing.PACK_SCHEMA
    # where the row came from (all kinds)
    ("kafka_partition", pa.int32(), IntegerType()),
    ("kafka_offset", pa.int64(), LongType()),
    # reject columns
    ("reason", pa.string(), StringType()),
    ("detail", pa.string(), StringType()),
    ("raw", pa.binary(), BinaryType()),
    # summary column: JSON of `streaming.read.summary.ReadSummary`
    ("summary", pa.string(), StringType()),
)


def arrow_schema(columns: tuple[_Column, ...]) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type) for name, arrow_type, _ in columns])


def spark_schema(columns: tuple[_Column, ...]) -> StructType:
    return StructType([StructField(name, spark_type, True) for name, _, spark_type in columns])


# The window stage's output: one row per part of a closed (bucket, window), as
# `streaming.stage.closing.ClosedWindow` gives it (its fields are these columns, in this order).
CLOSED_COLUMNS: Final[tuple[_Column, ...]] = (
    ("window_start", pa.int64(), LongType()),  # epoch ms
    ("window_end", pa.int64(), LongType()),  # epoch ms
    ("bucket", pa.int32(), IntegerType()),
    ("part", pa.int32(), IntegerType()),
    ("topics", pa.int64(), LongType()),
    ("namespaces", pa.string(), StringType()),
    ("payload", pa.binary(), BinaryType()),
    ("known", pa.binary(), BinaryType()),
    # the stage partials (part 0 of a close, when the stage was given layouts)
    ("partials", pa.binary(), BinaryType()),
)


# Value columns by how the windows treat them: rates are averaged, the rest is the latest.
RATE_COLUMNS: Final = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
LATEST_COLUMNS: Final = (
    "storage_size", "backlog_size", "offloaded_storage_size", "producer_count", "consumer_count",
)  # fmt: skip

PARSED_ARROW_SCHEMA: Final = arrow_schema(PARSED_COLUMNS)
PARSED_SPARK_SCHEMA: Final = spark_schema(PARSED_COLUMNS)
RAW_ARROW_SCHEMA: Final = arrow_schema(RAW_COLUMNS)
RAW_SPARK_SCHEMA: Final = spark_schema(RAW_COLUMNS)
CLOSED_ARROW_SCHEMA: Final = arrow_schema(CLOSED_COLUMNS)
CLOSED_SPARK_SCHEMA: Final = spark_schema(CLOSED_COLUMNS)
