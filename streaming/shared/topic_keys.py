"""A 64-bit key per (cluster, topic), so a window's topics are grouped on integers.

Grouping a window's events by topic name cost most of a close: Arrow's dictionary encoding
of 5M names took ~1.9 s of a 2.5M-topic bucket's ~4 s aggregation, and the known-topic
merge another ~1.9 s of name joins and set lookups (docs/decisions.md#64-bit-topic-keys).
So each event carries its topic's key, computed in the read task with the flush's other
topic columns (`streaming.read.topic_columns`) and once per cluster:

    topic_key(cluster, topic) = murmur3_x64_128(topic)[:64] XOR murmur3_x64_128(cluster)[:64]

A topic is identified by its key *and* its Pulsar hash position (CRC-32 of the name,
already in every row): 96 bits from two unrelated hash functions, at no extra bytes a
row but the key's 8 (the state store and the shuffle carry every event's bytes). Grouping
encodes the key and checks that the position agrees within each group; two topics of one
bucket sharing a key (odds ~n^2 / 2^65, about 2e-7 for a 2.5M-topic bucket) send that
step to the exact comparison of both. Two (cluster, topic) pairs sharing key and position
(odds ~n^2 / 2^97) would be counted as one topic. Neither hash resists a deliberate
collision: a tenant who can create topics could craft a name sharing both with another
topic's, and their stats would merge (nothing fails).

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

KEY_COLUMN: Final = "topic_key"
KEY_FIELD: Final = pa.field(KEY_COLUMN, pa.int64())

_TOPIC_SEED: Final = 0
_CLUSTER_SEED: Final = 1


# murmur3_x64_128 of UTF-8 bytes with seed 0 (_TOPIC_SEED), as 16 little-endian bytes.
_DIGEST: Final = mmh3.mmh3_x64_128_digest


def _hash(text: str, seed: int) -> int:
    return mmh3.hash64(text, seed, True, True)[0]


def topic_hash(full_name: str) -> int:
    """The topic's part of its key (signed 64 bits)."""
    return _hash(full_name, _TOPIC_SEED)


def topic_hashes(full_names: Sequence[str]) -> np.ndarray:
    """`topic_hash` of each name (int64), in C loops: the first 8 bytes of each name's
    128-bit digest are `hash64`'s first value, little-endian (a Python call per name took
    about twice as long: ~0.2 s of a 500,000-event batch's read tasks)."""
    return topic_hashes_utf8(list(map(str.encode, full_names)))


def topic_hashes_utf8(full_names: Sequence[bytes]) -> np.ndarray:
    """`topic_hashes` of names given as their UTF-8 bytes (as Arrow holds them)."""
    digests = b"".join(map(_DIGEST, full_names))
    return np.frombuffer(digests, dtype="<i8")[0::2].astype(np.int64)


class ClusterHashes:
    """Cluster name -> its part of the key, memoised (a deployment has a few clusters; the
    memo is cleared past `max_entries`, as a stream of made-up cluster names would grow it)."""

    def __init__(self, *, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._hashes: dict[str, int] = {}

    def of(self, clusters: pa.DictionaryArray) -> np.ndarray:
        """Each row's cluster part as an int64 array (hashed once per distinct cluster)."""
        hashes = self._hashes
        names = clusters.dictionary.to_pylist()
        if len(hashes) + len(names) > self.max_entries:
            hashes.clear()
        for cluster in set(names) - hashes.keys():
            hashes[cluster] = _hash(cluster, _CLUSTER_SEED)
        parts = np.fromiter(map(hashes.__getitem__, names), dtype=np.int64, count=len(names))
        taken: np.ndarray = parts[clusters.indices.to_numpy(zero_copy_only=False)]
        return taken

    def keys(self, topic_parts: np.ndarray, clusters: pa.DictionaryArray) -> np.ndarray:
        """The key of each row from its topic's part (`topic_hash`) and its cluster."""
        keys: np.ndarray = topic_parts ^ self.of(clusters)
        return keys


def topic_keys(clusters: Sequence[str], topics: Sequence[str]) -> np.ndarray:
    """The key of each (cluster, topic), from the names."""
    names = list(dict.fromkeys(topics))
    parts = dict(zip(names, topic_hashes(names).tolist(), strict=True))
    topic_part = np.fromiter(map(parts.__getitem__, topics), dtype=np.int64, count=len(topics))
    return ClusterHashes().keys(topic_part, pa.array(clusters).dictionary_encode())


def with_topic_keys(table: pa.Table) -> pa.Table:
    """`table` (with `cluster` and `topic` columns) with its key column, computed if absent."""
    if KEY_COLUMN in table.column_names:
        return table
    keys = topic_keys(table.column("cluster").to_pylist(), table.column("topic").to_pylist())
    return table.append_column(KEY_FIELD, pa.array(keys))


def group_codes(keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A code per row (int64): equal for the rows of one topic (key and position), numbered
    in the order topics first appear (rows sorted by code keep roughly their arrival order)."""
    encoded = pa.array(keys).dictionary_encode()  # Arrow's hash table: ~0.4 s for 5M rows
    codes: np.ndarray = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # Codes first appear in increasing order: a row is its code's first where it is larger
    # than every code before it.
    running_max = np.maximum.accumulate(codes)
    is_first = np.empty(len(codes), dtype=bool)
    is_first[:1] = True
    np.greater(codes[1:], running_max[:-1], out=is_first[1:])
    if np.array_equal(positions[is_first][codes], positions):
        return codes
    # Two topics share a key (odds ~n^2/2^65): encode key and position (~2.5x slower).
    both = np.empty((len(keys), 2), dtype=np.int64)
    both[:, 0], both[:, 1] = keys, positions
    pairs = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(keys), [None, pa.py_buffer(both)]
    )
    exact: np.ndarray = pairs.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    return exact.astype(np.int64)


def topics_in(
    keys: np.ndarray, positions: np.ndarray, set_keys: np.ndarray, set_positions: np.ndarray
) -> np.ndarray:
    """Whether each topic (key, position) is one of the topics (set_keys, set_positions)."""
    if len(keys) == 0 or len(set_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    sorted_set = np.sort(set_keys)
    if np.any(sorted_set[1:] == sorted_set[:-1]):
        # Two topics of the set share a key (odds ~n^2/2^65): compare (key, position) pairs.
        members = set(zip(set_keys.tolist(), set_positions.tolist(), strict=True))
        return np.fromiter(
            (t in members for t in zip(keys.tolist(), positions.tolist(), strict=True)),
            dtype=bool,
            count=len(keys),
        )
    index = pc.index_in(pa.array(keys), value_set=pa.array(set_keys))
    found: np.ndarray = index.is_valid().to_numpy(zero_copy_only=False)
    rows = index.fill_null(0).to_numpy()
    member: np.ndarray = found & (set_positions[rows] == positions)
    return member


__all__ = [
    "KEY_COLUMN",
    "KEY_FIELD",
    "ClusterHashes",
    "group_codes",
    "topic_hash",
    "topic_hashes",
    "topic_hashes_utf8",
    "topic_keys",
    "topics_in",
    "with_topic_keys",
]
