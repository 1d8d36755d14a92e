"""The window stage's output row is declared once (`streaming.shared.schema.CLOSED_COLUMNS`): the
dataclass, the Arrow and the Spark schemas and the driver's reads all follow it (pure)."""

from __future__ import annotations

from dataclasses import fields

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from streaming.driver.closed_windows import HEAD_COLUMNS
from streaming.shared.schema import CLOSED_ARROW_SCHEMA, CLOSED_COLUMNS, CLOSED_SPARK_SCHEMA
from streaming.stage.closing import ClosedWindow, closed_table


def test_the_closed_window_fields_are_the_columns_in_order() -> None:
    # `to_row` pairs them by position: a field added or moved in one place only fails here.
    names = [f.name.removesuffix("_ms") for f in fields(ClosedWindow)]
    assert names == [name for name, _, _ in CLOSED_COLUMNS]


def test_the_spark_schema_is_the_arrow_schema() -> None:
    assert from_arrow_schema(CLOSED_ARROW_SCHEMA) == CLOSED_SPARK_SCHEMA


def test_a_row_fills_every_column_with_its_field() -> None:
    row = ClosedWindow(
        window_start_ms=60_000, window_end_ms=180_000, bucket=3, part=1, topics=2,
        namespaces='[["c1", "t/ns"]]', payload=b"p", known=b"k", partials=b"s",
    )  # fmt: skip
    table = closed_table([row])
    assert table.schema == CLOSED_ARROW_SCHEMA
    assert table.to_pylist() == [
        {
            "window_start": 60_000, "window_end": 180_000, "bucket": 3, "part": 1, "topics": 2,
            "namespaces": '[["c1", "t/ns"]]', "payload": b"p", "known": b"k", "partials": b"s",
        }
    ]  # fmt: skip


def test_the_driver_reads_heads_among_the_columns() -> None:
    assert set(HEAD_COLUMNS) <= set(CLOSED_ARROW_SCHEMA.names)
    assert closed_table([]).equals(pa.Table.from_pylist([], schema=CLOSED_ARROW_SCHEMA))
