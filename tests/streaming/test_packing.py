"""Event packs and the window aggregation over them (pure: Arrow in, Arrow out)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.shared.packing import (
    KEYED_WINDOW_SCHEMA,
    PACK_SCHEMA,
    WHOLE_FRAME_MAX_ROWS,
    WINDOW_SCHEMA,
    aggregate_window,
    decode,
    decode_windows,
    encode,
    pack_events,
)
from streaming.shared.schema import LATEST_COLUMNS, RATE_COLUMNS
from streaming.shared.topic_keys import KEY_COLUMN, with_topic_keys

SLIDE_MS = 60_000
BASE_MS = 1_700_000_040_000  # a multiple of SLIDE_MS


def event(
    topic: str, event_ms: int, rate: float = 1.0, size: int = 0, cluster: str = "c1"
) -> dict[str, Any]:
    return {
        "cluster": cluster, "namespace": "t/ns", "topic": f"persistent://t/ns/{topic}",
        "position": len(topic), "event_ms": event_ms,
        **dict.fromkeys(RATE_COLUMNS, rate), **dict.fromkeys(LATEST_COLUMNS, size),
    }  # fmt: skip


# The events as a test writes them: without keys, computed from the names.
_WITHOUT_KEYS = pa.schema([f for f in PACK_SCHEMA if f.name != KEY_COLUMN])


def table(events: list[dict[str, Any]]) -> pa.Table:
    return with_topic_keys(pa.Table.from_pylist(events, schema=_WITHOUT_KEYS))


def test_a_pack_round_trips_through_its_payload() -> None:
    events = table([event("a", BASE_MS), event("b", BASE_MS + 5, rate=2.5)])
    assert decode([encode(events)], PACK_SCHEMA).equals(events)
    assert decode([], PACK_SCHEMA).num_rows == 0


def test_small_payloads_are_one_zstd_frame_and_large_ones_compressed_per_buffer() -> None:
    rows = [event(f"t{i % 97}", BASE_MS + i, rate=i / 7, size=i) for i in range(3_000)]
    small = table(rows[: WHOLE_FRAME_MAX_ROWS - 1])
    large = table(rows[:WHOLE_FRAME_MAX_ROWS])
    framed, per_buffer = encode(small), encode(large)
    assert framed[:4] == bytes.fromhex("28b52ffd")  # a zstd frame's magic number
    assert pa.ipc.open_stream(pa.py_buffer(per_buffer)).read_all().equals(large)
    lz4 = encode(small, codec="lz4")  # the transient codec is per buffer at any size
    assert pa.ipc.open_stream(pa.py_buffer(lz4)).read_all().equals(small)
    # Either form reads back, mixed in one decode, in order.
    both = decode([framed, per_buffer, lz4], PACK_SCHEMA)
    assert both.equals(pa.concat_tables([small, large, small]))


def test_a_pack_carries_only_the_labels_its_events_use() -> None:
    events = [
        {**event("a", BASE_MS), "namespace": f"t/ns{i}", "cluster": f"c{i % 2}"} for i in range(6)
    ]
    packs = pack_events(table(events), np.array([0, 1, 0, 1, 0, 1]), slide_ms=SLIDE_MS)
    for pack, parity in zip(packs, (0, 1), strict=True):
        rows = decode([pack.payload], PACK_SCHEMA)
        namespaces = rows.column("namespace").combine_chunks()
        assert namespaces.dictionary.to_pylist() == [f"t/ns{i}" for i in range(parity, 6, 2)]
        assert rows.column("cluster").combine_chunks().dictionary.to_pylist() == [f"c{parity}"]
        assert namespaces.to_pylist() == [f"t/ns{i}" for i in range(parity, 6, 2)]


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2"]),
            st.sampled_from(["t/a", "t/b", "t/c"]),
            st.integers(0, 2),
            st.integers(0, 1),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_every_pack_carries_exactly_its_labels_in_the_flushs_order(
    labels: list[tuple[str, str, int, int]],
) -> None:
    # Packs that use every label of the flush keep its dictionaries as they are, the others
    # get theirs cut: either way a pack's dictionary is the labels its events use, in the
    # order the flush first met them.
    events = [
        {**event(f"x{i}", BASE_MS + pane * SLIDE_MS + i), "cluster": cluster, "namespace": ns}
        for i, (cluster, ns, _, pane) in enumerate(labels)
    ]
    flush = table(events)  # dictionaries in the order of first appearance, as a flush's
    buckets = np.array([bucket for _, _, bucket, _ in labels])
    for pack in pack_events(flush, buckets, slide_ms=SLIDE_MS):
        rows = decode([pack.payload], PACK_SCHEMA)
        for name in ("cluster", "namespace"):
            column = rows.column(name).combine_chunks()
            met = [e[name] for e in events]
            used = set(column.to_pylist())
            assert column.dictionary.to_pylist() == [v for v in dict.fromkeys(met) if v in used]


def test_events_are_packed_by_bucket_and_pane_in_arrival_order() -> None:
    events = [
        event("a", BASE_MS + 10),  # bucket 1, pane 0
        event("b", BASE_MS + SLIDE_MS),  # bucket 1, pane 1
        event("c", BASE_MS + 5),  # bucket 0, pane 0
        event("d", BASE_MS + 59_999),  # bucket 1, pane 0
    ]
    packs = pack_events(table(events), np.array([1, 1, 0, 1]), slide_ms=SLIDE_MS)
    got = [
        (p.bucket, p.pane_start_ms, p.max_event_ms, p.events,
         [e["topic"][-1] for e in decode([p.payload], PACK_SCHEMA).to_pylist()])
        for p in packs
    ]  # fmt: skip
    assert got == [
        (0, BASE_MS, BASE_MS + 5, 1, ["c"]),
        (1, BASE_MS, BASE_MS + 59_999, 2, ["a", "d"]),
        (1, BASE_MS + SLIDE_MS, BASE_MS + SLIDE_MS, 1, ["b"]),
    ]
    assert pack_events(table([]), np.array([], dtype=np.int64), slide_ms=SLIDE_MS) == []


def reference(events: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (cluster, topic): mean rates, the newest sample's sizes (a tie: the later one)."""
    by_topic: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_topic[(e["cluster"], e["topic"])].append(e)
    out = {}
    for key, samples in by_topic.items():
        newest = max(enumerate(samples), key=lambda pair: (pair[1]["event_ms"], pair[0]))[1]
        out[key] = {
            **{c: sum(s[c] for s in samples) / len(samples) for c in RATE_COLUMNS},
            **{c: newest[c] for c in LATEST_COLUMNS},
            "samples": len(samples),
            "namespace": newest["namespace"],
            "position": newest["position"],
        }
    return out


EVENTS = st.lists(
    st.builds(
        event,
        st.sampled_from("abcde"),
        st.integers(BASE_MS, BASE_MS + 2 * SLIDE_MS - 1) | st.just(BASE_MS + 7),  # ties
        st.floats(0, 1e6, allow_nan=False),
        st.integers(0, 2**40),
        st.sampled_from(["c1", "c2"]),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(EVENTS, st.integers(1, 4))
def test_a_window_aggregates_like_the_plain_definition(
    events: list[dict[str, Any]], cut: int
) -> None:
    # Packs arrive in several payloads; their concatenation keeps arrival order.
    payloads = [encode(table(events[i::cut])) for i in range(cut)]
    arrival = [e for i in range(cut) for e in events[i::cut]]
    end_ms = BASE_MS + 2 * SLIDE_MS
    window = aggregate_window(
        decode(payloads, PACK_SCHEMA), bucket=3, window_start_ms=BASE_MS, window_end_ms=end_ms
    )
    assert window.schema == KEYED_WINDOW_SCHEMA
    rows = window.to_pylist()
    got = {(r["cluster"], r["topic"]): r for r in rows}
    want = reference(arrival)
    assert got.keys() == want.keys() and len(rows) == len(want)
    for key, values in want.items():
        row = got[key]
        for name in (*LATEST_COLUMNS, "samples", "namespace", "position"):
            assert row[name] == values[name], name
        for name in RATE_COLUMNS:
            assert abs(row[name] - values[name]) <= 1e-9 * max(1.0, values[name]), name
        assert row["bucket"] == 3
        assert row["window_start"].timestamp() * 1000 == BASE_MS
        assert row["window_end"].timestamp() * 1000 == end_ms


def test_closed_windows_decode_into_one_table() -> None:
    first = aggregate_window(
        table([event("a", BASE_MS)]), bucket=0, window_start_ms=0, window_end_ms=1
    )
    second = aggregate_window(
        table([event("b", BASE_MS)]), bucket=1, window_start_ms=0, window_end_ms=1
    )
    both = decode_windows([encode(w.drop_columns([KEY_COLUMN])) for w in (first, second)])
    assert both.schema == WINDOW_SCHEMA
    assert both.column("topic").to_pylist() == ["persistent://t/ns/a", "persistent://t/ns/b"]
    assert decode_windows([]).num_rows == 0
