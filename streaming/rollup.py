"""Columnar roll-up of a batch's closed per-topic windows to bundle loads (the driver's hot path).

`streaming.rollup_reference` is the plain-Python definition (one object per topic); this module does
the same on the Arrow table Spark returns, so the driver's work per batch grows with the
number of bundles, not of topics: rows are sorted once, bundles are contiguous position
ranges in that order, and per-topic Python objects are built only for the bundles the
handler wants topics for and for topics past the offload size. Sums are taken with the
builtin `sum` over the same values in the same (position, topic) order as
`balancer.core.load.roll_up`, so the results are equal, not merely close
(tests/streaming/test_rollup.py checks this against `streaming.rollup_reference.roll_up_window`).

`KnownTopics` is the columnar `streaming.rollup_reference.SeenTopics`: every topic seen per
(cluster, namespace) with the end of its newest window, expired after a TTL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from balancer.core.bundles import BundleRange, NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad
from streaming.schema import RATE_COLUMNS

TOPIC_COLUMNS = (
    "topic",
    "position",
    *RATE_COLUMNS,
    "producer_count",
    "consumer_count",
    "storage_size",
    "backlog_size",
    "offloaded_storage_size",
)  # fmt: skip  (TopicLoad's field order)
_KNOWN_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("namespace", pa.string()),
        ("topic", pa.string()),
        ("position", pa.int64()),
        ("end_ms", pa.int64()),
    ]
)


def end_ms(table: pa.Table) -> pa.Array:
    """The `window_end` column as epoch milliseconds (int64)."""
    ends = table.column("window_end")
    if pa.types.is_timestamp(ends.type):
        return pc.divide(ends.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()), 1000)
    return ends.cast(pa.int64())


def _groups(table: pa.Table, keys: tuple[str, str]) -> list[tuple[tuple[str, str], int, int]]:
    """(key values, start, stop) of each run of equal `keys` (two string columns, e.g.
    cluster and namespace) in a table sorted by them."""
    n = table.num_rows
    if n == 0:
        return []
    changes = np.zeros(n, dtype=bool)
    changes[0] = True
    for key in keys:
        codes = table.column(key).combine_chunks().dictionary_encode().indices
        values = np.asarray(codes.to_numpy(zero_copy_only=False))
        changes[1:] |= values[1:] != values[:-1]
    starts = np.flatnonzero(changes).tolist()
    stops = [*starts[1:], n]
    heads = table.select(list(keys)).take(pa.array(starts)).to_pylist()
    return [
        ((row[keys[0]], row[keys[1]]), start, stop)
        for row, start, stop in zip(heads, starts, stops, strict=True)
    ]


def bundle_index(layout: NamespaceBundles, positions: np.ndarray) -> np.ndarray:
    """Index of the bundle holding each position (vectorised `NamespaceBundles.find`)."""
    boundaries = np.asarray(layout.boundaries, dtype=np.int64)
    index = np.searchsorted(boundaries, positions, side="right") - 1
    return np.minimum(index, layout.num_bundles - 1)  # 0xffffffff is in the last bundle


class KnownTopics:
    """Topics seen per (cluster, namespace) with the newest window end they closed."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self._table = _KNOWN_SCHEMA.empty_table()
        self._positions: dict[tuple[str, str], np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def observe(self, table: pa.Table) -> None:
        """Remember the topics of closed-window rows (window_end, cluster, namespace, ...)."""
        if table.num_rows == 0:
            return
        new = pa.table(
            {
                "cluster": table.column("cluster"),
                "namespace": table.column("namespace"),
                "topic": table.column("topic"),
                "position": table.column("position").cast(pa.int64()),
                "end_ms": end_ms(table),
            },
            schema=_KNOWN_SCHEMA,
        )
        both = pa.concat_tables([self._table, new])
        merged = both.group_by(["cluster", "namespace", "topic"], use_threads=False).aggregate(
            [("position", "max"), ("end_ms", "max")]
        )
        self._table = pa.table(
            {
                "cluster": merged.column("cluster"),
                "namespace": merged.column("namespace"),
                "topic": merged.column("topic"),
                "position": merged.column("position_max"),
                "end_ms": merged.column("end_ms_max"),
            },
            schema=_KNOWN_SCHEMA,
        )
        self._positions = None

    def expire(self, now_ms: int) -> None:
        alive = pc.greater(self._table.column("end_ms"), now_ms - self.ttl_ms)
        if not pc.all(alive).as_py():
            self._table = self._table.filter(alive)
            self._positions = None

    def positions(self, cluster: str, namespace: str) -> np.ndarray:
        if self._positions is None:
            ordered = self._table.sort_by([("cluster", "ascending"), ("namespace", "ascending")])
            column = ordered.column("position").to_numpy()
            self._positions = {
                key: column[start:stop]
                for key, start, stop in _groups(ordered, ("cluster", "namespace"))
            }
        return self._positions.get((cluster, namespace), np.zeros(0, dtype=np.int64))


@dataclass(frozen=True)
class NewestWindow:
    """The newest closed window's rows, sorted by (cluster, namespace, position, topic)."""

    table: pa.Table
    window_end_ms: int

    @classmethod
    def of(cls, closed: pa.Table) -> NewestWindow:
        if closed.num_rows == 0:
            return cls(closed, 0)
        ends = end_ms(closed)
        newest = int(pc.max(ends).as_py())
        rows = closed.filter(pc.equal(ends, newest)).sort_by(
            [(k, "ascending") for k in ("cluster", "namespace", "position", "topic")]
        )
        return cls(rows, newest)

    def topic_loads(self, start: int = 0, stop: int | None = None) -> list[TopicLoad]:
        """TopicLoad objects of rows [start, stop)."""
        part = self.table.slice(start, (self.table.num_rows if stop is None else stop) - start)
        columns = [part.column(name).to_pylist() for name in TOPIC_COLUMNS]
        return [TopicLoad(*values) for values in zip(*columns, strict=True)]

    def large_topics(self, min_storage_bytes: int) -> list[tuple[str, TopicLoad]]:
        """(cluster, load) of the topics whose storage size is at least `min_storage_bytes`."""
        mask = pc.greater_equal(self.table.column("storage_size"), min_storage_bytes)
        large = NewestWindow(self.table.filter(mask), self.window_end_ms)
        clusters = large.table.column("cluster").to_pylist()
        return list(zip(clusters, large.topic_loads(), strict=True))


def roll_up_newest(
    newest: NewestWindow,
    *,
    layouts: Mapping[tuple[str, str], NamespaceBundles],
    known: KnownTopics,
    namespace_known: Mapping[tuple[str, str], int | None],
    wants_topics: Callable[[BundleLoad], bool],
) -> list[BundleLoad]:
    """Bundle loads of the newest window, sorted by (cluster, namespace, bundle).

    As `streaming.rollup_reference.roll_up_window`: only bundles with a reporting topic appear;
    (cluster, namespace) pairs without a layout are left out. A bundle carries its topics
    only when `wants_topics` says so for the bundle without them.
    """
    out: list[BundleLoad] = []
    table = newest.table
    for (cluster, namespace), start, stop in _groups(table, ("cluster", "namespace")):
        layout = layouts.get((cluster, namespace))
        if layout is None:
            continue
        part = table.slice(start, stop - start)
        positions = part.column("position").to_numpy()
        index = bundle_index(layout, positions)
        cuts = np.flatnonzero(np.diff(index)) + 1
        seg_starts = [0, *cuts.tolist()]
        seg_stops = [*cuts.tolist(), len(index)]
        seen = known.positions(cluster, namespace)
        known_counts = np.bincount(bundle_index(layout, seen), minlength=layout.num_bundles)
        total = namespace_known.get((cluster, namespace))
        scale = total / len(seen) if total is not None and len(seen) and total > len(seen) else 1.0
        values = {name: part.column(name).to_pylist() for name in RATE_COLUMNS}
        # Python ints: a sum of int64 session counts must not wrap.
        producers = part.column("producer_count").to_pylist()
        consumers = part.column("consumer_count").to_pylist()
        session_values = [p + c for p, c in zip(producers, consumers, strict=True)]
        boundaries = layout.boundaries
        for a, b in zip(seg_starts, seg_stops, strict=True):
            i = int(index[a])
            reported = b - a
            seen_known = max(reported, int(known_counts[i]))
            bundle = BundleLoad(
                cluster=cluster,
                namespace=namespace,
                bundle=BundleRange(boundaries[i], boundaries[i + 1]),
                window_end_ms=newest.window_end_ms,
                msg_rate_in=sum(values["msg_rate_in"][a:b]),
                msg_rate_out=sum(values["msg_rate_out"][a:b]),
                msg_throughput_in=sum(values["msg_throughput_in"][a:b]),
                msg_throughput_out=sum(values["msg_throughput_out"][a:b]),
                topic_count=reported,
                session_count=sum(session_values[a:b]),
                reported_topics=reported,
                known_topics=math.ceil(seen_known * scale - 1e-9),
            )
            if wants_topics(bundle):
                loads = NewestWindow(part, newest.window_end_ms).topic_loads(a, b)
                bundle = replace(bundle, topics=tuple(loads))
            out.append(bundle)
    return out


__all__ = [
    "KnownTopics",
    "NewestWindow",
    "bundle_index",
    "end_ms",
    "roll_up_newest",
]
