"""The driver's half of the roll-up of closed windows to bundles: merge the partials.

`tests.streaming.rollup_reference` is the plain-Python definition (one object per topic). Here
the same result is computed in two steps, so the driver's work grows with bundles, not topics:
the bundle partials of each closed (bucket, window) on the executors
(`streaming.stage.partials`), then here `merge_partials` adds the rows of each bundle up over
the buckets. The rate sums are exact sums rounded once, so the result equals the reference
whatever the grouping of topics into buckets and executors.

Per-topic rows reach the driver only through `streaming.stage.partials.topic_rows`: the topics
of the bundles the handler wants (those near a limit) and the topics past the offload size.

Pure: Arrow tables and layouts in, Arrow tables and `BundleLoad`s out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from balancer.core.bundles import BundleRange
from balancer.core.exact_sums import total
from balancer.core.load import BundleLoad, TopicLoad
from streaming.shared.packing import decode, dictionary_codes
from streaming.shared.schema import RATE_COLUMNS
from streaming.stage.closing import KNOWN_POSITIONS_SCHEMA
from streaming.stage.partials import (
    TOPIC_COLUMNS,
    TOPIC_ROWS_SCHEMA,
    BundleKey,
    Layouts,
    stable_order,
)


def large_topics_of(partials: pa.Table) -> pa.Table:
    """The topic rows the `large_topics_row`s among `partials` carry."""
    payloads = [p for p in partials.column("large_topics").to_pylist() if p is not None]
    return decode(payloads, TOPIC_ROWS_SCHEMA)


def _rate_totals(partials: pa.Table, group: np.ndarray, groups: int) -> dict[str, list[float]]:
    """Per group, each rate's correctly rounded sum of every part of its rows (`total`)."""
    out: dict[str, list[float]] = {}
    for name in RATE_COLUMNS:
        lists = partials.column(name).combine_chunks()
        values = lists.flatten().to_numpy()
        owner = np.repeat(group, np.diff(lists.offsets.to_numpy()))  # the group of each part
        order = stable_order(owner, groups)
        bounds = np.searchsorted(owner[order], np.arange(groups + 1)).tolist()
        ordered = values[order].tolist()
        out[name] = [total([ordered[a:b]]) for a, b in pairwise(bounds)]
    return out


def merge_partials(
    partials: pa.Table,
    *,
    window_end_ms: int,
    namespace_known: Mapping[tuple[str, str], int | None],
) -> list[BundleLoad]:
    """Bundle loads of one window from its partial rows, sorted by (cluster, namespace, bundle).

    As `tests.streaming.rollup_reference.roll_up_window` without topics: only bundles with a
    reporting topic appear; when the namespace's total topic count is known and larger than
    the topics seen, each bundle's known count is scaled up by that ratio. Column by column:
    the driver's work per partial row is a few list reads (10k bundles x 4 buckets of rows
    as dicts took ~0.4 s).
    """
    partials = partials.filter(pc.is_null(partials.column("large_topics")))
    key_columns = [
        partials.column(n).to_pylist() for n in ("cluster", "namespace", "lower", "upper")
    ]
    keys = list(zip(*key_columns, strict=True))
    ids: dict[tuple[str, str, int, int], int] = {}
    group = np.fromiter(
        (ids.setdefault(key, len(ids)) for key in keys), dtype=np.int64, count=len(keys)
    )
    reported, known, sessions = ([0] * len(ids) for _ in range(3))
    # Per (bucket, part): each partial row of a part repeats its namespace's count.
    seen: dict[tuple[str, str], dict[tuple[int, int], int]] = defaultdict(dict)
    columns = [
        partials.column(n).to_pylist()
        for n in ("reported", "known", "sessions", "bucket", "part", "namespace_known")
    ]
    rows = zip(group.tolist(), keys, *columns, strict=True)
    for g, key, r, k, s, bucket, part, in_namespace in rows:
        reported[g] += r
        known[g] += k
        sessions[g] += int(s)
        seen[key[:2]][(bucket, part)] = in_namespace
    rates = _rate_totals(partials, group, len(ids))
    out: list[BundleLoad] = []
    for (cluster, namespace, lower, upper), g in sorted(ids.items()):
        if reported[g] == 0:
            continue
        seen_total = sum(seen[(cluster, namespace)].values())
        namespace_total = namespace_known.get((cluster, namespace))
        scale = (
            namespace_total / seen_total
            if namespace_total is not None and seen_total and namespace_total > seen_total
            else 1.0
        )
        out.append(
            BundleLoad(
                cluster=cluster,
                namespace=namespace,
                bundle=BundleRange(lower, upper),
                window_end_ms=window_end_ms,
                topic_count=reported[g],
                session_count=sessions[g],
                reported_topics=reported[g],
                known_topics=math.ceil(max(reported[g], known[g]) * scale - 1e-9),
                msg_rate_in=rates["msg_rate_in"][g],
                msg_rate_out=rates["msg_rate_out"][g],
                msg_throughput_in=rates["msg_throughput_in"][g],
                msg_throughput_out=rates["msg_throughput_out"][g],
            )
        )
    return out


def topic_loads(*tables: pa.Table) -> list[tuple[str, str, TopicLoad]]:
    """(cluster, namespace, load) per topic row of `tables` (a topic in several once), sorted
    by (cluster, namespace, position, topic)."""
    ordered = sorted_topic_rows(*tables)
    columns = [ordered.column(name).to_pylist() for name in TOPIC_COLUMNS]
    clusters = ordered.column("cluster").to_pylist()
    namespaces = ordered.column("namespace").to_pylist()
    loads = [TopicLoad(*values) for values in zip(*columns, strict=True)]
    return list(zip(clusters, namespaces, loads, strict=True))


def sorted_topic_rows(*tables: pa.Table) -> pa.Table:
    """The topic rows of `tables` (a topic in several once: its first row), sorted by
    (cluster, namespace, position, topic): `topic_loads`' order, as columns.

    Sorted on one integer a row, its (cluster, namespace)'s rank and its position, with the
    rare rows sharing one (a namespace's topics at one position, or one topic's rows) then
    ordered by topic: Arrow's sort on the four columns took ~0.03 s a 100,000-topic window
    (issue 44). The sort is stable, so each run of a (cluster, topic) keeps its first row."""
    rows = pa.concat_tables(tables)
    n = rows.num_rows
    if n < 2:
        return rows
    rows = rows.take(_topic_order(rows))
    cluster, topic = rows.column("cluster"), rows.column("topic")
    repeated = pc.and_(
        pc.equal(cluster.slice(1), cluster.slice(0, n - 1)),
        pc.equal(topic.slice(1), topic.slice(0, n - 1)),
    )
    if not pc.any(repeated).as_py():
        return rows
    keep = np.concatenate(([True], ~repeated.to_numpy(zero_copy_only=False)))
    return rows.filter(pa.array(keep))


def _topic_order(rows: pa.Table) -> np.ndarray:
    """Row indices in (cluster, namespace, position, topic) order, stable."""
    nulls = any(rows.column(name).null_count for name in _TOPIC_ORDER)
    positions = rows.column("position").to_numpy(zero_copy_only=False)
    if nulls or positions.min() < 0 or positions.max() >= 1 << 32:  # not hash positions
        sort_keys = [(k, "ascending") for k in _TOPIC_ORDER]
        by_arrow: np.ndarray = pc.sort_indices(rows, sort_keys=sort_keys).to_numpy()
        return by_arrow
    cluster_codes, clusters_seen = dictionary_codes(rows.column("cluster"))
    namespace_codes, namespaces_seen = dictionary_codes(rows.column("namespace"))
    clusters, namespaces = clusters_seen.to_pylist(), namespaces_seen.to_pylist()
    pairs = cluster_codes * len(namespaces) + namespace_codes
    present = np.unique(pairs).tolist()
    ranks = np.zeros(len(clusters) * len(namespaces), dtype=np.int64)
    by_name = sorted(present, key=lambda p: (clusters[p // len(namespaces)],
                                             namespaces[p % len(namespaces)]))  # fmt: skip
    ranks[by_name] = np.arange(len(by_name))
    keys = (ranks[pairs] << 32) | positions
    order: np.ndarray = np.argsort(keys, kind="stable")
    ordered = keys[order]
    ties = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(ties):  # runs of one key: by topic, then as they came
        topics = rows.column("topic")
        starts = np.flatnonzero(np.diff(np.concatenate(([-2], ties))) > 1)
        for first, last in zip(ties[starts].tolist(), _run_ends(ties, starts), strict=True):
            run = order[first : last + 2].tolist()
            names = topics.take(run).to_pylist()
            order[first : last + 2] = [i for _, i in sorted(zip(names, run, strict=True))]
    return order


def _run_ends(ties: np.ndarray, starts: np.ndarray) -> list[int]:
    """The last tie of each run of consecutive ties (`starts`: each run's first)."""
    return [int(ties[end - 1]) for end in [*starts[1:].tolist(), len(ties)]]


_TOPIC_ORDER = ("cluster", "namespace", "position", "topic")


def with_topics(
    bundles: list[BundleLoad],
    loads: list[tuple[str, str, TopicLoad]],
    layouts: Layouts,
    wanted: Collection[BundleKey],
) -> list[BundleLoad]:
    """`bundles` with the topics of the wanted ones attached (in (position, topic) order)."""
    by_bundle: dict[BundleKey, list[TopicLoad]] = defaultdict(list)
    for cluster, namespace, load in loads:
        layout = layouts.get((cluster, namespace))
        if layout is not None:
            by_bundle[(cluster, namespace, layout.find(load.position).lower)].append(load)
    wanted_set = set(wanted)
    return [
        replace(b, topics=tuple(by_bundle[key]))
        if (key := (b.cluster, b.namespace, b.bundle.lower)) in wanted_set
        else b
        for b in bundles
    ]


def decode_known(payloads: Sequence[bytes]) -> pa.Table:
    return decode(payloads, KNOWN_POSITIONS_SCHEMA)


__all__ = [
    "decode_known",
    "large_topics_of",
    "merge_partials",
    "sorted_topic_rows",
    "topic_loads",
    "with_topics",
]
