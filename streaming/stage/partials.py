"""Bundle partials of one closed (bucket, window): the executors' half of the roll-up.

Per closed row of the window stage (`streaming.stage.closing.ClosedWindow`),
`bundle_partials` maps each reporting topic and each known topic of the bucket to its bundle
with the layouts in force and gives one row per (bundle, bucket): topic and session counts,
known topics, and the exact parts of the four rate sums (`balancer.core.exact_sums`). The
driver adds these rows up per bundle (`streaming.driver.rollup.merge_partials`).

Two places compute them, with this one code: the window stage in its close, when the driver
handed it the layouts of the batch (`StageLayouts`, a Spark local property: then the driver
runs no job of its own for them; decided by measurement, docs/decisions.md#stage-partials),
and otherwise the driver's partials job on the executors
(`streaming.driver.closed_windows.partials_task`).

Pure: Arrow tables and layouts in, Arrow tables out.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Final

import numpy as np
import pyarrow as pa

from balancer.core.bundles import NamespaceBundles
from balancer.core.exact_sums import grouped_exact_parts, grouped_int_sums
from streaming.shared.packing import TRANSIENT_CODEC, WINDOW_SCHEMA, dictionary_codes, encode
from streaming.shared.schema import RATE_COLUMNS
from streaming.stage.closing import PartialsOf

Layouts = Mapping[tuple[str, str], NamespaceBundles]
BundleKey = tuple[str, str, int]  # cluster, namespace, bundle lower bound


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


# One bundle's part of a window from one bucket.
PARTIAL_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("namespace", pa.string()),
        ("lower", pa.int64()),
        ("upper", pa.int64()),
        ("bucket", pa.int32()),
        # The first part of the bucket's close (streaming.stage.closing.ClosedWindow) this row sums.
        ("part", pa.int32()),
        ("reported", pa.int64()),  # topics of the bundle that reported in the window
        ("known", pa.int64()),  # known topics of the bucket in the bundle
        ("namespace_known", pa.int64()),  # known topics of the part in the namespace
        ("sessions", pa.string()),  # producers + consumers, a decimal integer: never wraps
        *((name, pa.list_(pa.float64())) for name in RATE_COLUMNS),  # exact parts of the sum
        # Set on a row of its own per (bucket, window), all else null: the topic rows at
        # least the offload size (TOPIC_ROWS_SCHEMA, an Arrow payload), read in the same pass.
        ("large_topics", pa.binary()),
    ]
)


# The per-topic rows that reach the driver.
TOPIC_ROWS_SCHEMA: Final = pa.schema(
    [field for field in WINDOW_SCHEMA if field.name not in ("window_start", "bucket")]
)


def bundle_index(layout: NamespaceBundles, positions: np.ndarray) -> np.ndarray:
    """Index of the bundle holding each position (vectorised `NamespaceBundles.find`)."""
    boundaries = np.asarray(layout.boundaries, dtype=np.int64)
    index = np.searchsorted(boundaries, positions, side="right") - 1
    return np.minimum(index, layout.num_bundles - 1)  # 0xffffffff is in the last bundle


def stable_order(codes: np.ndarray, distinct: int) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` of codes in `[0, distinct)`: as 16-bit integers when
    they fit, which numpy sorts by radix (~8x faster than int64 for a bucket's topics)."""
    if distinct <= 1 << 15:
        codes = codes.astype(np.int16)
    order: np.ndarray = np.argsort(codes, kind="stable")
    return order


def _namespace_groups(table: pa.Table) -> Iterator[tuple[tuple[str, str], np.ndarray]]:
    """((cluster, namespace), row indices) of each namespace in `table`."""
    if table.num_rows == 0:
        return
    cluster_codes, clusters_seen = dictionary_codes(table.column("cluster"))
    namespace_codes, namespaces_seen = dictionary_codes(table.column("namespace"))
    clusters, namespaces = clusters_seen.to_pylist(), namespaces_seen.to_pylist()
    codes = cluster_codes * len(namespaces) + namespace_codes
    order = stable_order(codes, len(clusters) * len(namespaces))
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    for rows in np.split(order, cuts):
        code = int(codes[rows[0]])
        yield (clusters[code // len(namespaces)], namespaces[code % len(namespaces)]), rows


def bundle_partials(
    window: pa.Table, known: pa.Table, layouts: Layouts, *, bucket: int, part: int = 0
) -> pa.Table:
    """PARTIAL_SCHEMA rows of one part of a closed (bucket, window): `window` is its
    per-topic rows, `known` its known topics (KNOWN_POSITIONS_SCHEMA). Namespaces without a layout
    are left out; a bundle appears when a topic of this bucket reported in it or is known."""
    known_by_namespace = dict(_namespace_groups(known))
    known_positions = known.column("position").to_numpy() if known.num_rows else None
    window_by_namespace = dict(_namespace_groups(window))
    positions = window.column("position").to_numpy()
    # Per namespace, its rows bundle by bundle and the bundles it gives rows for; the sums
    # then run once over every namespace's rows (one group per (namespace, bundle)): per
    # namespace and rate column they were thousands of small numpy calls a window (issue 44).
    in_order: list[np.ndarray] = []
    group_ends: list[np.ndarray] = []  # where each row's group ends in the rows of all
    clusters: list[str] = []
    namespaces: list[str] = []
    lowers: list[np.ndarray] = []
    uppers: list[np.ndarray] = []
    reported_counts: list[np.ndarray] = []
    known_counts: list[np.ndarray] = []
    namespace_known: list[np.ndarray] = []
    offset = 0
    # A namespace's known topics in this bucket count even where none of them reported here.
    for key in sorted(window_by_namespace.keys() | known_by_namespace.keys()):
        layout = layouts.get(key)
        if layout is None:
            continue
        rows = window_by_namespace.get(key, np.zeros(0, dtype=np.int64))
        index = bundle_index(layout, positions[rows])
        known_rows = known_by_namespace.get(key)
        known_index = (
            bundle_index(layout, known_positions[known_rows])
            if known_positions is not None and known_rows is not None
            else np.zeros(0, dtype=np.int64)
        )
        reported = np.bincount(index, minlength=layout.num_bundles)
        known_here = np.bincount(known_index, minlength=layout.num_bundles)
        order = stable_order(index, layout.num_bundles)
        starts = np.searchsorted(index[order], np.arange(layout.num_bundles + 1))
        kept = np.flatnonzero((reported > 0) | (known_here > 0))
        # A bundle left out holds no reported row, so the kept bundles' groups still cover
        # the namespace's rows end to end: each ends where the next kept one starts.
        in_order.append(rows[order])
        group_ends.append(starts[kept + 1] + offset)
        offset += len(rows)
        boundaries = np.asarray(layout.boundaries, dtype=np.int64)
        clusters.extend([key[0]] * len(kept))
        namespaces.extend([key[1]] * len(kept))
        lowers.append(boundaries[kept])
        uppers.append(boundaries[kept + 1])
        reported_counts.append(reported[kept])
        known_counts.append(known_here[kept])
        namespace_known.append(np.full(len(kept), len(known_index), dtype=np.int64))
    n = len(clusters)
    if n == 0:
        return PARTIAL_SCHEMA.empty_table()
    rows_in_order = np.concatenate(in_order)
    starts = np.concatenate([np.zeros(1, dtype=np.int64), *group_ends])
    bounds = starts.tolist()
    columns: dict[str, pa.Array] = {
        "cluster": pa.array(clusters, pa.string()),
        "namespace": pa.array(namespaces, pa.string()),
        "lower": pa.array(np.concatenate(lowers), pa.int64()),
        "upper": pa.array(np.concatenate(uppers), pa.int64()),
        "bucket": pa.array(np.full(n, bucket, dtype=np.int32), pa.int32()),
        "part": pa.array(np.full(n, part, dtype=np.int32), pa.int32()),
        "reported": pa.array(np.concatenate(reported_counts), pa.int64()),
        "known": pa.array(np.concatenate(known_counts), pa.int64()),
        "namespace_known": pa.array(np.concatenate(namespace_known), pa.int64()),
        "sessions": pa.array(
            [
                str(s)
                for s in map(
                    operator.add,
                    *(
                        grouped_int_sums(window.column(name).to_numpy()[rows_in_order], bounds)
                        for name in ("producer_count", "consumer_count")
                    ),
                )
            ],
            pa.string(),
        ),
        "large_topics": pa.nulls(n, pa.binary()),
    }
    for name in RATE_COLUMNS:
        columns[name] = _parts_array(
            grouped_exact_parts(window.column(name).to_numpy()[rows_in_order], bounds)
        )
    return pa.table([columns[name] for name in PARTIAL_SCHEMA.names], schema=PARTIAL_SCHEMA)


def _parts_array(parts: list[tuple[float, ...]]) -> pa.Array:
    """A list<float64> array of each group's exact parts."""
    sizes = np.fromiter(map(len, parts), dtype=np.int32, count=len(parts))
    offsets = np.concatenate([np.zeros(1, dtype=np.int32), np.cumsum(sizes, dtype=np.int32)])
    values = np.fromiter(chain.from_iterable(parts), dtype=np.float64, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.float64()))


def close_partials(
    window: pa.Table,
    known: pa.Table,
    layouts: Layouts,
    *,
    bucket: int,
    part: int = 0,
    min_storage_bytes: int | None,
) -> pa.Table:
    """PARTIAL_SCHEMA rows of a closed (bucket, window) (or of some of its parts): its
    bundle partials and, when `min_storage_bytes` is set, a row with its topics at least
    that large (`large_topics_row`)."""
    tables = [bundle_partials(window, known, layouts, bucket=bucket, part=part)]
    if min_storage_bytes is not None:
        large = topic_rows(window, layouts, wanted=(), min_storage_bytes=min_storage_bytes)
        if large.num_rows:
            tables.append(large_topics_row(large))
    return pa.concat_tables(tables)


@dataclass(frozen=True)
class StageLayouts:
    """The layouts (and offload size) the window stage rolls a close up with, so the driver
    needs no job of its own for the bundle partials when they are still the ones in force.

    The driver hands them to the stage's tasks as a Spark local property of the job that
    runs the batch (`STAGE_LAYOUTS_PROPERTY`, JSON): a task's properties are those of its
    job, so the stage sees exactly what the driver sent for this batch, and a replay after a
    restart sees what the new driver sent.
    """

    layouts: Mapping[tuple[str, str], NamespaceBundles]
    min_storage_bytes: int | None

    def to_text(self) -> str:
        return json.dumps(
            {
                "min_storage_bytes": self.min_storage_bytes,
                "layouts": [
                    [cluster, namespace, list(layout.boundaries)]
                    for (cluster, namespace), layout in sorted(self.layouts.items())
                ],
            }
        )

    @classmethod
    def from_text(cls, text: str) -> StageLayouts:
        body = json.loads(text)
        layouts = {
            (cluster, namespace): NamespaceBundles(namespace, tuple(boundaries))
            for cluster, namespace, boundaries in body["layouts"]
        }
        return cls(layouts, body["min_storage_bytes"])

    def in_force(self, layouts: Layouts, min_storage_bytes: int | None) -> bool:
        """Whether partials rolled up with these give what `layouts` would (every layout
        there the same here, and the same offload size)."""
        return min_storage_bytes == self.min_storage_bytes and all(
            self.layouts.get(key) == layout for key, layout in layouts.items()
        )


STAGE_LAYOUTS_PROPERTY: Final = "pulsar_balancer.stage_layouts"


def stage_roll_up(stage: StageLayouts) -> PartialsOf:
    """What the stage's close computes with `stage`: `close_partials` as a payload."""

    def partials_of(window: pa.Table, known: pa.Table, bucket: int) -> bytes:
        rows = close_partials(
            window, known, stage.layouts, bucket=bucket, min_storage_bytes=stage.min_storage_bytes
        )
        return encode(rows, codec=TRANSIENT_CODEC)

    return partials_of


def large_topics_row(rows: pa.Table) -> pa.Table:
    """A PARTIAL_SCHEMA row carrying `rows` (TOPIC_ROWS_SCHEMA) in `large_topics`."""
    values: dict[str, list[object]] = {name: [None] for name in PARTIAL_SCHEMA.names}
    values["large_topics"] = [encode(rows, codec=TRANSIENT_CODEC)]
    return pa.table(values, schema=PARTIAL_SCHEMA)


def topic_rows(
    window: pa.Table,
    layouts: Layouts,
    *,
    wanted: Collection[BundleKey],
    min_storage_bytes: int | None,
) -> pa.Table:
    """The per-topic rows (TOPIC_ROWS_SCHEMA) the driver needs of one closed (bucket, window):
    those of the `wanted` bundles and those at least `min_storage_bytes` large, in namespaces
    with a layout."""
    wanted_set = set(wanted)
    if not wanted_set and min_storage_bytes is not None and window.num_rows:
        # The large topics only: few rows, so filter on size before grouping by namespace.
        storage = window.column("storage_size").to_numpy()
        window = window.filter(pa.array(storage >= min_storage_bytes))
    keep = np.zeros(window.num_rows, dtype=bool)
    storage = window.column("storage_size").to_numpy() if window.num_rows else None
    for key, rows in _namespace_groups(window):
        layout = layouts.get(key)
        if layout is None or storage is None:
            continue
        if min_storage_bytes is not None:
            keep[rows] |= storage[rows] >= min_storage_bytes
        lowers = layout.boundaries[:-1]
        wanted_index = [i for i, lower in enumerate(lowers) if (*key, lower) in wanted_set]
        if wanted_index:
            index = bundle_index(layout, window.column("position").to_numpy()[rows])
            keep[rows] |= np.isin(index, wanted_index)
    return window.filter(pa.array(keep)).select(TOPIC_ROWS_SCHEMA.names).cast(TOPIC_ROWS_SCHEMA)
