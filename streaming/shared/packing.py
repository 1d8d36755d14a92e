"""Event packs: a read task's events grouped by (PIP-157 bucket, pane), as Arrow IPC payloads.

Spark's per-row cost, not the arithmetic, bounds a streaming aggregation over one row per
event (measured ~45-50k events/s on 2 cores for the window stage alone,
docs/decisions.md#event-packs-not-rows).
So the read tasks hand Spark one row per (bucket, pane) instead: a *pack*, whose payload is
the pane's events of that bucket as an Arrow table. A pane is one slide of event time
(`[k * slide, (k+1) * slide)`); every window is a whole number of panes, so a pack belongs
entirely to each of the `window / slide` windows that hold its pane.

The window stage (`streaming.stage.windows`) keeps the packs of each bucket's open windows in
Spark's state store and, when the watermark closes a window, aggregates them here
(`aggregate_window`) into one row per topic: average rates, latest sizes and session counts,
sample count. The result stays on the executors, one payload per (bucket, window), where it
is rolled up to bundles (`streaming.driver.rollup`).

Purely computational: Arrow tables in, Arrow tables and bytes out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa

from streaming.shared.schema import LATEST_COLUMNS, RATE_COLUMNS
from streaming.shared.topic_keys import KEY_COLUMN, KEY_FIELD, group_codes, with_topic_keys

# A string column that repeats a few values. In a pack, a plain string column costs ~3 bytes
# an event after zstd (its offsets), a dictionary column almost nothing: cluster and
# namespace are stored so, which pays for most of the topic key's 8 bytes.
_LABEL: Final = pa.dictionary(pa.int32(), pa.string())

# One event of a pack: what the window aggregation needs, nothing else.
PACK_SCHEMA: Final = pa.schema(
    [
        ("cluster", _LABEL),
        ("namespace", _LABEL),
        ("topic", pa.string()),
        ("position", pa.int64()),  # Pulsar's bundle hash position of the topic
        ("event_ms", pa.int64()),
        *((name, pa.float64()) for name in RATE_COLUMNS),
        *((name, pa.int64()) for name in LATEST_COLUMNS),
        KEY_FIELD,  # the topic's key (streaming.shared.topic_keys)
    ]
)

# One topic's values over one closed window, as the stage emits them (the executors roll
# them up to bundles).
WINDOW_SCHEMA: Final = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("bucket", pa.int32()),
        ("cluster", pa.string()),
        ("namespace", pa.string()),
        ("topic", pa.string()),
        ("position", pa.int64()),
        *((name, pa.float64()) for name in RATE_COLUMNS),
        *((name, pa.int64()) for name in LATEST_COLUMNS),
        ("samples", pa.int64()),
    ]
)
# The same with each topic's key: what the aggregation gives and the known topics need (the
# key stays in the stage: 8 bytes a topic less for every reader of a close).
KEYED_WINDOW_SCHEMA: Final = WINDOW_SCHEMA.append(KEY_FIELD)


@dataclass(frozen=True, slots=True)
class Pack:
    """The events of one bucket in one pane, from one read task."""

    bucket: int
    pane_start_ms: int
    max_event_ms: int  # the newest event: what the watermark sees
    events: int
    payload: bytes


# zstd shrinks a pack ~5x (topic names repeat their prefixes) for ~0.8 us an event to
# compress and read back: less to shuffle, to send to the state store and to keep there.
# What lives only within a batch (a close's output, read once or twice by the executors)
# takes lz4: per 2.5M topics, 0.15 s to write and 0.03 s to read against zstd's 0.30 and
# 0.23 s, for 140 MB against 111. A reader needs no codec: each payload names its own.
TRANSIENT_CODEC: Final = "lz4"
_IPC_OPTIONS: Final = {
    codec: pa.ipc.IpcWriteOptions(compression=codec) for codec in ("zstd", TRANSIENT_CODEC)
}


# Below this many rows a zstd payload is one zstd frame over the uncompressed IPC stream,
# not zstd per Arrow buffer: a pack has ~40 buffers, each compressed by a call of its own
# whose fixed cost dominates a small pack. Measured on a 2-core Intel Xeon, per
# buffer against one frame: 600 events encode 0.57 / 0.26 ms, decode 0.45 / 0.16 ms, 46 / 54
# bytes an event; 2,000 events 1.05 / 0.72 and 0.56 / 0.45 ms; 25,000 events 6.5 / 8.5 and
# 2.5 / 4.4 ms (Arrow's threads compress buffers in parallel). Small packs are what a
# backlog of one event per message makes (docs/decisions.md#small-packs-as-one-zstd-frame).
WHOLE_FRAME_MAX_ROWS: Final = 2_000
# A zstd frame starts with this magic number; an Arrow IPC stream never does (it starts with
# 0xFFFFFFFF, or with a non-negative length in the format before Arrow 0.15).
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


def encode(table: pa.Table | pa.RecordBatch, *, codec: str = "zstd") -> bytes:
    """An Arrow IPC stream of `table` (schema included: payloads are self-describing);
    with zstd and fewer than `WHOLE_FRAME_MAX_ROWS` rows, inside one zstd frame."""
    sink = pa.BufferOutputStream()
    if codec == "zstd" and table.num_rows < WHOLE_FRAME_MAX_ROWS:
        with (
            pa.CompressedOutputStream(sink, "zstd") as frame,
            pa.ipc.new_stream(frame, table.schema) as writer,
        ):
            writer.write(table)
    else:
        with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS[codec]) as writer:
            writer.write(table)
    return bytes(sink.getvalue().to_pybytes())


def _read(payload: bytes) -> pa.Table:
    """The table of one payload, in either form `encode` writes."""
    if payload[:4] == _ZSTD_MAGIC:
        return pa.ipc.open_stream(
            pa.CompressedInputStream(pa.BufferReader(payload), "zstd")
        ).read_all()
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


def decode(payloads: Iterable[bytes], schema: pa.Schema) -> pa.Table:
    """The concatenated tables of `payloads`, in order (an empty table of `schema` if none).

    Payloads stored by an earlier version (no topic keys, plain string labels, columns
    since dropped) are brought to `schema`: keys computed (`with_topic_keys`), labels cast,
    other columns left out.
    """
    tables = [_read(p) for p in payloads]
    if KEY_COLUMN in schema.names:
        tables = [with_topic_keys(t) for t in tables]
    tables = [t if t.schema == schema else t.select(schema.names).cast(schema) for t in tables]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def pack_events(events: pa.Table, buckets: np.ndarray, *, slide_ms: int) -> list[Pack]:
    """Split `events` (PACK_SCHEMA rows) into packs by (bucket, pane), arrival order kept."""
    if events.num_rows == 0:
        return []
    event_ms = events.column("event_ms").to_numpy()
    panes = event_ms - event_ms % slide_ms  # pane starts (event times are >= 0: `%` floors)
    order = np.lexsort((panes, buckets))  # stable: equal keys keep arrival order
    sorted_buckets, sorted_panes = buckets[order], panes[order]
    changes = np.flatnonzero(
        (sorted_buckets[1:] != sorted_buckets[:-1]) | (sorted_panes[1:] != sorted_panes[:-1])
    )
    starts = [0, *(changes + 1).tolist()]
    stops = [*starts[1:], len(order)]
    ordered = events.take(pa.array(order))
    sorted_ms = event_ms[order]
    whole = _use_every_label(ordered, np.asarray(starts))
    packs = []
    for a, b, full in zip(starts, stops, whole.tolist(), strict=True):
        rows = ordered.slice(a, b - a)
        packs.append(
            Pack(
                bucket=int(sorted_buckets[a]),
                pane_start_ms=int(sorted_panes[a]),
                max_event_ms=int(sorted_ms[a:b].max()),
                events=b - a,
                payload=encode(rows if full else _compact_labels(rows)),
            )
        )
    return packs


def _use_every_label(table: pa.Table, starts: np.ndarray) -> np.ndarray:
    """Whether the rows from each of `starts` to the next use every value of every
    dictionary column's dictionary: then their slice needs no compaction (one pass over the
    codes for all of them; compacting each pack cost ~10 % of a read task where every pack
    held every namespace)."""
    whole = np.ones(len(starts), dtype=bool)
    lengths = np.diff(np.append(starts, table.num_rows))
    pack_of_row = np.repeat(np.arange(len(starts), dtype=np.int64), lengths)
    for field, column in zip(table.schema, table.columns, strict=True):
        if not pa.types.is_dictionary(field.type):
            continue
        array = column.combine_chunks()
        size = len(array.dictionary)
        if size == 0:
            continue
        pairs = np.unique(pack_of_row * size + array.indices.to_numpy(zero_copy_only=False))
        whole &= np.bincount(pairs // size, minlength=len(starts)) == size
    return whole


def _compact_labels(table: pa.Table) -> pa.Table:
    """`table` with each dictionary column's dictionary cut to the values its rows use (a
    slice keeps the whole flush's dictionary, which every pack would otherwise carry)."""
    for index, field in enumerate(table.schema):
        if not pa.types.is_dictionary(field.type):
            continue
        column = table.column(index).combine_chunks()
        used, codes = np.unique(column.indices.to_numpy(), return_inverse=True)
        compact = pa.DictionaryArray.from_arrays(
            pa.array(codes.astype(np.int32)), column.dictionary.take(pa.array(used))
        )
        table = table.set_column(index, field, compact)
    return table


def dictionary_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dictionary codes of a column (int64, one per row) and its distinct values."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = array.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary


def aggregate_window(
    events: pa.Table, *, bucket: int, window_start_ms: int, window_end_ms: int
) -> pa.Table:
    """One row per (cluster, topic) of a window's events (KEYED_WINDOW_SCHEMA).

    Rates are averaged over the topic's samples; sizes and session counts are the newest
    sample's. Two samples of one topic with the same millisecond: the later one to arrive
    wins (the sort is stable and packs are kept in arrival order).
    """
    n_rows = events.num_rows
    if n_rows == 0:
        return KEYED_WINDOW_SCHEMA.empty_table()
    # Grouped with numpy over codes of the topics' keys (streaming.shared.topic_keys), not of
    # their names: Arrow's dictionary encoding of the names took half the aggregation.
    key = group_codes(events.column(KEY_COLUMN).to_numpy(), events.column("position").to_numpy())
    # By topic, then event time; stable, so equal times keep their arrival order.
    order = np.lexsort((events.column("event_ms").to_numpy(), key))
    sorted_key = key[order]
    first = np.empty(n_rows, dtype=bool)
    first[0] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=first[1:])
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    stops = np.append(starts[1:], n_rows)
    n = len(starts)
    newest_rows = order[stops - 1]  # each topic's newest sample
    # Topics in the order their newest samples arrived: the take of the names then reads
    # the events front to back (~2x faster than in random order; the sort is ~free when the
    # codes already give that order, as when each pane lists the topics alike).
    by_arrival = np.argsort(newest_rows, kind="stable")
    samples = (stops - starts)[by_arrival]
    newest = events.take(pa.array(newest_rows[by_arrival]))

    def mean(name: str) -> pa.Array:
        # bincount adds each topic's samples one after the other, oldest first.
        values = events.column(name).to_numpy()[order]
        sums = np.bincount(group, weights=values, minlength=n)[by_arrival]
        return pa.array(sums / samples)

    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "window_start": pa.array(np.full(n, window_start_ms * 1000), pa.timestamp("us", "UTC")),
        "window_end": pa.array(np.full(n, window_end_ms * 1000), pa.timestamp("us", "UTC")),
        "bucket": pa.array(np.full(n, bucket, dtype=np.int32)),
        "cluster": newest.column("cluster").cast(pa.string()),
        "namespace": newest.column("namespace").cast(pa.string()),
        "topic": newest.column("topic"),
        "position": newest.column("position"),
        **{name: mean(name) for name in RATE_COLUMNS},
        **{name: newest.column(name) for name in LATEST_COLUMNS},
        "samples": pa.array(samples.astype(np.int64)),
        KEY_COLUMN: newest.column(KEY_COLUMN),
    }
    return pa.table(columns, schema=KEYED_WINDOW_SCHEMA)


def events_of(rows: pa.RecordBatch | pa.Table) -> list[dict[str, Any]]:
    """The events of the pack rows among `rows` (parsed rows), each with its pack's bucket.

    Packs in row order, events in their pack's order (tests and diagnostics).
    """
    out: list[dict[str, Any]] = []
    for row in rows.to_pylist():
        if row["payload"] is None:
            continue
        for event in decode([row["payload"]], PACK_SCHEMA).to_pylist():
            out.append({**event, "bucket": row["bucket"]})
    return out


def decode_windows(payloads: Sequence[bytes]) -> pa.Table:
    """The per-topic window rows of a batch's closed-window payloads."""
    return decode(payloads, WINDOW_SCHEMA)


__all__ = [
    "KEYED_WINDOW_SCHEMA",
    "PACK_SCHEMA",
    "TRANSIENT_CODEC",
    "WINDOW_SCHEMA",
    "Pack",
    "aggregate_window",
    "decode",
    "decode_windows",
    "dictionary_codes",
    "encode",
    "events_of",
    "pack_events",
]
