"""A 128-bit key per (cluster, topic), so a window's topics are grouped on integers.

Grouping a window's events by topic name cost most of a close: Arrow's dictionary encoding
of 5M names took ~1.9 s of a 2.5M-topic bucket's ~4 s aggregation, and the known-topic
merge another ~1.9 s of name joins and set lookups (docs/benchmarks.md). So each event
carries its topic's key, computed once per topic in the read task's topic cache:

    key(cluster, topic) = murmur3_x64_128(topic, seed 0) XOR murmur3_x64_128(cluster, seed 1)

as two int64 columns, `key_hi` and `key_lo`. Grouping sorts on `key_hi` only and checks
that `key_lo` agrees within each group; two topics of one bucket sharing `key_hi` (odds
~n^2 / 2^65, about 2e-7 for a 2.5M-topic bucket) send that step to the exact comparison of
both halves. Two (cluster, topic) pairs sharing all 128 bits (odds ~n^2 / 2^129) would be
counted as one topic: the risk every content-addressed store takes.

Packs and known topics stored before keys existed have none; `with_topic_keys` computes
them from the names, so a checkpoint of that version keeps working.

Purely computational.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY_COLUMNS: Final = ("key_hi", "key_lo")
KEY_FIELDS: Final = tuple(pa.field(name, pa.int64()) for name in KEY_COLUMNS)

_TOPIC_SEED: Final = 0
_CLUSTER_SEED: Final = 1


def topic_hash(full_name: str) -> tuple[int, int]:
    """The topic's half of its key (signed 64-bit halves of murmur3_x64_128)."""
    return mmh3.hash64(full_name, _TOPIC_SEED, True, True)


class ClusterHashes:
    """Cluster name -> its half of the key, memoised (a deployment has a few clusters)."""

    def __init__(self) -> None:
        self._hashes: dict[str, tuple[int, int]] = {}

    def of(self, clusters: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each cluster's (hi, lo) halves as int64 arrays."""
        hashes = self._hashes
        for cluster in set(clusters) - hashes.keys():
            hashes[cluster] = mmh3.hash64(cluster, _CLUSTER_SEED, True, True)
        pairs = list(map(hashes.__getitem__, clusters))
        n = len(pairs)
        his = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=n)
        los = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=n)
        return his, los


def topic_keys(clusters: Sequence[str], topics: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(key_hi, key_lo) of each (cluster, topic), from the names."""
    cluster_hi, cluster_lo = ClusterHashes().of(clusters)
    memo: dict[str, tuple[int, int]] = {}
    pairs = [memo[t] if t in memo else memo.setdefault(t, topic_hash(t)) for t in topics]
    n = len(pairs)
    topic_hi = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=n)
    topic_lo = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=n)
    return topic_hi ^ cluster_hi, topic_lo ^ cluster_lo


def with_topic_keys(table: pa.Table) -> pa.Table:
    """`table` (with `cluster` and `topic` columns) with its key columns, computed when absent."""
    if all(name in table.column_names for name in KEY_COLUMNS):
        return table
    hi, lo = topic_keys(table.column("cluster").to_pylist(), table.column("topic").to_pylist())
    return table.append_column(KEY_FIELDS[0], pa.array(hi)).append_column(
        KEY_FIELDS[1], pa.array(lo)
    )


def group_codes(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """A code per row (int64): equal for the rows of one key, numbered in the order keys
    first appear (so rows sorted by code keep roughly their arrival order)."""
    encoded = pa.array(hi).dictionary_encode()  # Arrow's hash table: ~0.4 s for 5M rows
    codes: np.ndarray = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # Codes first appear in increasing order: a row is its code's first where it is larger
    # than every code before it.
    running_max = np.maximum.accumulate(codes)
    is_first = np.empty(len(codes), dtype=bool)
    is_first[:1] = True
    np.greater(codes[1:], running_max[:-1], out=is_first[1:])
    if np.array_equal(lo[is_first][codes], lo):
        return codes
    # Two keys share key_hi (odds ~n^2/2^65): encode both halves (~2.5x slower).
    both = np.empty((len(hi), 2), dtype=np.int64)
    both[:, 0], both[:, 1] = hi, lo
    pairs = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(hi), [None, pa.py_buffer(both)])
    exact: np.ndarray = pairs.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    return exact.astype(np.int64)


def keys_in(hi: np.ndarray, lo: np.ndarray, set_hi: np.ndarray, set_lo: np.ndarray) -> np.ndarray:
    """Whether each key (hi, lo) is one of the keys (set_hi, set_lo) (bool array)."""
    if len(hi) == 0 or len(set_hi) == 0:
        return np.zeros(len(hi), dtype=bool)
    sorted_set = np.sort(set_hi)
    if np.any(sorted_set[1:] == sorted_set[:-1]):
        # Two keys of the set share key_hi (odds ~n^2/2^65): compare whole keys.
        members = set(zip(set_hi.tolist(), set_lo.tolist(), strict=True))
        return np.fromiter(
            (k in members for k in zip(hi.tolist(), lo.tolist(), strict=True)),
            dtype=bool,
            count=len(hi),
        )
    index = pc.index_in(pa.array(hi), value_set=pa.array(set_hi))
    found: np.ndarray = index.is_valid().to_numpy(zero_copy_only=False)
    positions = index.fill_null(0).to_numpy()
    member: np.ndarray = found & (set_lo[positions] == lo)
    return member


__all__ = [
    "KEY_COLUMNS",
    "KEY_FIELDS",
    "ClusterHashes",
    "group_codes",
    "keys_in",
    "topic_hash",
    "topic_keys",
    "with_topic_keys",
]
