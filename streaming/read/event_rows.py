"""A read task's kept events as Arrow columns, whichever format they came in.

JSON events (`streaming.read.fastparse.FastEvent` or `TopicStatsEvent` objects) become columns
when their run ends (`json_rows`); an Arrow envelope's record batch (`balancer.core.arrow_envelope`)
already is columns (no Python object per event): its event columns are `ROWS_SCHEMA`'s too,
so a flush concatenates them in arrival order.

An Arrow envelope's rows are checked at the flush, all of a flush's at once (`arrow_verdicts`):
rules at least as strict as `balancer.core.events.validate_event`'s, vectorized; a message
with a row they refuse goes to `parse_message`, which gives the exact reasons. Checking a
flush at once, not each message, keeps the fixed cost of each check (~2-10 us an Arrow
call) off the ~100 events of a message.

Purely computational.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

import numpy as np
import pyarrow as pa

from balancer.core.events import (
    COUNT_FIELDS,
    MAX_RATE,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    RATE_FIELDS,
    SIZE_FIELDS,
    TopicStatsEvent,
)
from streaming.read.fastparse import FastEvent
from streaming.read.topic_columns import canonical_rows, full_name

# An accepted event from either JSON path: the same field names.
Accepted = FastEvent | TopicStatsEvent

VALUE_FIELDS: Final = (*RATE_FIELDS, *SIZE_FIELDS, *COUNT_FIELDS)
ROWS_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("topic", pa.string()),  # the full name once checked
        ("timestamp_ms", pa.int64()),
        *((name, pa.float64()) for name in RATE_FIELDS),
        *((name, pa.int64()) for name in (*SIZE_FIELDS, *COUNT_FIELDS)),
    ]
)
_NAMES: Final = tuple(ROWS_SCHEMA.names)
_FLOATS: Final = frozenset(RATE_FIELDS)


def json_rows(events: Sequence[Accepted], full_names: Sequence[str]) -> pa.RecordBatch:
    """The columns of accepted JSON events, topics as their full names.

    map(attrgetter) keeps each column's loop in C; numbers go straight into numpy arrays
    (a list of Python numbers first took 3-4x as long,
    docs/decisions.md#read-task-columns-straight-into-numpy).
    """
    n = len(events)
    columns: list[pa.Array] = [
        pa.array(list(map(attrgetter("cluster"), events)), pa.string()),
        pa.array(full_names, pa.string()),
        _numbers(events, "timestamp_ms", n, np.int64),
    ]
    for name in VALUE_FIELDS:
        columns.append(_numbers(events, name, n, np.float64 if name in _FLOATS else np.int64))
    return pa.RecordBatch.from_arrays(columns, schema=ROWS_SCHEMA)


def _numbers(objects: Sequence[object], name: str, n: int, dtype: Any) -> pa.Array:
    # Counts and sizes fit int64: the validators bound them.
    return pa.array(np.fromiter(map(attrgetter(name), objects), dtype=dtype, count=n))


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What the vectorized checks found in a flush's Arrow rows."""

    ok: np.ndarray  # bool per row: every rule holds
    topic: pa.Array  # the full names (those of rows not ok: anything)
    renamed: bool  # whether any topic was not sent as its full name


def arrow_verdicts(
    rows: pa.RecordBatch | pa.Table,
    *,
    latest_ms: int | None,
    clusters: frozenset[str] | None,
) -> Verdicts:
    """Which rows pass rules at least as strict as `validate_event`'s (then it accepts them
    with the same values), and the rows' full topic names.

    `latest_ms`: the newest event time accepted (the reader's clock plus the skew);
    `clusters`: the configured clusters. No nulls (but `broker`, not among the rows).
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    table = table.combine_chunks()
    n = table.num_rows
    if n == 0:
        return Verdicts(np.zeros(0, dtype=bool), pa.array([], pa.string()), renamed=False)
    ok = np.ones(n, dtype=bool)
    for column in table.columns:
        if column.null_count:
            ok &= column.is_valid().to_numpy(zero_copy_only=False)
    timestamps = _values(table, "timestamp_ms")
    ok &= (timestamps >= MIN_TIMESTAMP_MS) & (timestamps < MAX_TIMESTAMP_MS)
    if latest_ms is not None:
        ok &= timestamps <= latest_ms
    for name in RATE_FIELDS:
        rates = _values(table, name)
        # NaN fails both; -0.0 passes, as validate_event keeps it. `<`: the slow path
        # judges a rate of exactly MAX_RATE (accepted) like the JSON fast path does.
        ok &= (rates >= 0.0) & (rates < MAX_RATE)
    for name in (*SIZE_FIELDS, *COUNT_FIELDS):
        ok &= _values(table, name) >= 0
    ok &= _clusters_ok(table.column("cluster").chunk(0), clusters)
    topic = table.column("topic").chunk(0)
    canonical = canonical_rows(topic)
    odd = np.flatnonzero(ok & ~canonical)
    if odd.size == 0:
        return Verdicts(ok, topic, renamed=False)
    # Another spelling (normalised), a name outside ASCII, or not a topic name: rare.
    names = topic.to_pylist()
    for i in odd.tolist():
        full = full_name(names[i])
        if full is None:
            ok[i] = False
        else:
            names[i] = full
    return Verdicts(ok, pa.array(names, pa.string()), renamed=True)


def _values(table: pa.Table, name: str) -> np.ndarray:
    """A column's values (a null as 0: the null check refuses its row)."""
    array = table.column(name).chunk(0)
    if array.null_count:
        array = array.fill_null(0)
    values: np.ndarray = array.to_numpy(zero_copy_only=False)
    return values


def _clusters_ok(cluster: pa.Array, clusters: frozenset[str] | None) -> np.ndarray:
    """Non-empty, and configured when `clusters` is given (one look-up per distinct name)."""
    encoded = cluster.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    good = np.array(
        [bool(c) and (clusters is None or c in clusters) for c in names] + [False], dtype=bool
    )
    codes = encoded.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)
    ok: np.ndarray = good[codes]
    return ok


__all__ = [
    "ROWS_SCHEMA",
    "VALUE_FIELDS",
    "Accepted",
    "Verdicts",
    "arrow_verdicts",
    "json_rows",
]
