"""Topic keys: what identifies a (cluster, topic) in a window, and the exact paths taken when
two topics share a key (forced here: at real odds it would never be exercised)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.hashing import hash_position
from streaming.shared.packing import (
    KEYED_WINDOW_SCHEMA,
    PACK_SCHEMA,
    aggregate_window,
    decode,
    encode,
)
from streaming.shared.schema import LATEST_COLUMNS, RATE_COLUMNS
from streaming.shared.topic_keys import (
    KEY_COLUMN,
    ClusterHashes,
    group_codes,
    topic_hash,
    topic_hashes,
    topic_keys,
    topics_in,
    with_topic_keys,
)
from streaming.stage.closing import KNOWN_SCHEMA, remember

BASE_MS = 1_700_000_040_000


def test_a_key_depends_on_the_cluster_and_the_topic() -> None:
    keys = topic_keys(
        ["c1", "c1", "c2", "c1"],
        [
            "persistent://t/ns/a",
            "persistent://t/ns/b",
            "persistent://t/ns/a",
            "persistent://t/ns/a",
        ],
    ).tolist()
    assert keys[0] == keys[3]  # the same pair, the same key
    assert len(set(keys[:3])) == 3
    # The read task's way (topic part cached per topic, cluster part per cluster) agrees.
    (cluster_part,) = ClusterHashes().of(pa.array(["c2"]).dictionary_encode()).tolist()
    assert keys[2] == topic_hash("persistent://t/ns/a") ^ cluster_part
    # A small memo, cleared when full, gives the same parts.
    memo = ClusterHashes(max_entries=2)
    for clusters in (["c1", "c2"], ["c3", "c2", "c2"], ["c2"]):
        got = memo.of(pa.array(clusters).dictionary_encode()).tolist()
        assert got == ClusterHashes().of(pa.array(clusters).dictionary_encode()).tolist()
        assert len(memo._hashes) <= 2


@given(st.lists(st.text(min_size=1), max_size=20))  # any text: non-ASCII names too
@settings(max_examples=200, deadline=None)
def test_the_hashes_of_many_names_are_each_names_hash(names: list[str]) -> None:
    # The read tasks hash a flush's names in C loops over 128-bit digests (issue 42); the
    # key stored in the state must stay `topic_hash`'s (hash64's first value, signed).
    got = topic_hashes(names)
    assert got.dtype == np.int64
    assert got.tolist() == [topic_hash(name) for name in names]


def test_group_codes_number_topics_in_order_of_first_appearance() -> None:
    keys = np.array([7, 3, 7, 9, 3], dtype=np.int64)
    positions = np.array([1, 2, 1, 4, 2], dtype=np.int64)
    assert group_codes(keys, positions).tolist() == [0, 1, 0, 2, 1]


def test_topics_sharing_a_key_stay_apart() -> None:
    keys = np.array([7, 7, 3, 7], dtype=np.int64)
    positions = np.array([1, 2, 5, 1], dtype=np.int64)  # (7, 1) and (7, 2) are two topics
    codes = group_codes(keys, positions).tolist()
    assert codes[0] == codes[3] and len({codes[0], codes[1], codes[2]}) == 3


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=30),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=30),
)
def test_topics_in_is_set_membership_of_key_and_position(
    queries: list[tuple[int, int]], members: list[tuple[int, int]]
) -> None:
    # Tiny keys: keys collide all the time, and the set often repeats one.
    def columns(topics: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        return np.array([t[0] for t in topics], np.int64), np.array(
            [t[1] for t in topics], np.int64
        )

    got = topics_in(*columns(queries), *columns(members)).tolist()
    assert got == [q in set(members) for q in queries]


def event(topic: str, event_ms: int, rate: float, size: int) -> dict[str, Any]:
    return {
        "cluster": "c1", "namespace": "t/ns", "topic": f"persistent://t/ns/{topic}",
        "position": hash_position(f"persistent://t/ns/{topic}"), "event_ms": event_ms,
        **dict.fromkeys(RATE_COLUMNS, rate), **dict.fromkeys(LATEST_COLUMNS, size),
    }  # fmt: skip


def without_keys(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([f for f in schema if f.name != KEY_COLUMN]))


def forced_key(table: pa.Table) -> pa.Table:
    """`table` with every topic's key set to 1 (positions differ: the topics stay apart)."""
    index = table.schema.get_field_index(KEY_COLUMN)
    return table.set_column(index, KEY_COLUMN, pa.array(np.ones(table.num_rows, dtype=np.int64)))


def test_a_window_whose_topics_share_a_key_aggregates_exactly() -> None:
    rows = [
        event("a", BASE_MS, 1.0, 10),
        event("b", BASE_MS + 1, 3.0, 20),
        event("a", BASE_MS + 60_000, 2.0, 11),
        event("b", BASE_MS + 60_001, 5.0, 21),
    ]
    events = with_topic_keys(without_keys(rows, PACK_SCHEMA))

    def by_topic(table: pa.Table) -> dict[str, tuple[float, int, int]]:
        window = aggregate_window(
            table, bucket=0, window_start_ms=BASE_MS, window_end_ms=BASE_MS + 120_000
        )
        return {
            r["topic"]: (r["msg_rate_in"], r["storage_size"], r["samples"])
            for r in window.to_pylist()
        }

    want = {"persistent://t/ns/a": (1.5, 11, 2), "persistent://t/ns/b": (4.0, 21, 2)}
    assert by_topic(events) == want
    assert by_topic(forced_key(events)) == want


def test_the_known_topics_merge_keeps_a_topic_whose_key_collides() -> None:
    def window(*topics: str) -> pa.Table:
        events = with_topic_keys(
            without_keys([event(t, BASE_MS, 1.0, 1) for t in topics], PACK_SCHEMA)
        )
        rows = aggregate_window(
            events, bucket=0, window_start_ms=BASE_MS, window_end_ms=BASE_MS + 1
        )
        return forced_key(rows)

    known = remember(KNOWN_SCHEMA.empty_table(), window("a", "b"), end_ms=1_000, ttl_ms=10_000)
    known = remember(known, window("b", "c"), end_ms=2_000, ttl_ms=10_000)
    ends = {r["position"]: r["end_ms"] for r in known.to_pylist()}
    want = {"a": 1_000, "b": 2_000, "c": 2_000}  # one row each; a is not taken for b
    assert ends == {hash_position(f"persistent://t/ns/{t}"): end for t, end in want.items()}


def test_payloads_stored_before_keys_existed_get_their_keys() -> None:
    # A checkpoint of the previous version holds packs and known topics without keys.
    # ... and plain string labels.
    old_pack = without_keys([event("a", BASE_MS, 1.0, 1)], PACK_SCHEMA)
    old_pack = old_pack.cast(
        pa.schema(
            [
                f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f
                for f in old_pack.schema
            ]
        )
    )
    new_pack = with_topic_keys(without_keys([event("a", BASE_MS + 60_000, 3.0, 2)], PACK_SCHEMA))
    events = decode([encode(old_pack), encode(new_pack)], PACK_SCHEMA)
    assert events.schema == PACK_SCHEMA
    window = aggregate_window(
        events, bucket=0, window_start_ms=BASE_MS, window_end_ms=BASE_MS + 120_000
    )
    assert window.schema == KEYED_WINDOW_SCHEMA
    assert [(r["topic"], r["msg_rate_in"], r["samples"]) for r in window.to_pylist()] == [
        ("persistent://t/ns/a", 2.0, 2)
    ]
    # ... and known topics with their names (stored until 2026-11-25).
    named_known = pa.schema(
        [("cluster", pa.string()), ("namespace", pa.string()), ("topic", pa.string()),
         ("position", pa.int64()), ("end_ms", pa.int64())]
    )  # fmt: skip
    old_known = without_keys(
        [
            {
                "cluster": "c1",
                "namespace": "t/ns",
                "topic": "persistent://t/ns/a",
                "position": 1,
                "end_ms": 5,
            }
        ],
        named_known,
    )
    known = decode([encode(old_known)], KNOWN_SCHEMA)
    assert known.schema == KNOWN_SCHEMA
    assert known.drop_columns([KEY_COLUMN]).to_pylist() == [
        {"cluster": "c1", "namespace": "t/ns", "position": 1, "end_ms": 5}
    ]
    # Known topics with names and keys (stored from 2026-11-24 to 2026-11-25).
    keyed = with_topic_keys(old_known)
    assert decode([encode(keyed)], KNOWN_SCHEMA).equals(known)
    (key,) = topic_keys(["c1"], ["persistent://t/ns/a"]).tolist()
    assert known.column(KEY_COLUMN).to_pylist() == [key]
