"""The columnar roll-up equals the plain-Python definition (streaming.rollup_reference), exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import BundleLoad, TopicLoad
from streaming.batch import windows_table
from streaming.rollup import KnownTopics, NewestWindow, bundle_index, roll_up_newest
from streaming.rollup_reference import SeenTopics, TopicWindow, roll_up_window

END = 1_700_000_100_000
NAMESPACES = [("c1", "t/a"), ("c1", "t/b"), ("c2", "t/a")]

rates = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=2**62)


@st.composite
def windows(draw: st.DrawFn) -> TopicWindow:
    cluster, namespace = draw(st.sampled_from(NAMESPACES))
    topic = f"persistent://{namespace}/{draw(st.text('xyz0é', min_size=1, max_size=4))}"
    load = TopicLoad(
        topic, hash_position(topic), draw(rates), draw(rates), draw(rates), draw(rates),
        draw(counts), draw(counts), draw(counts), draw(counts), draw(counts),
    )  # fmt: skip
    end = END - 60_000 * draw(st.integers(0, 3))
    return TopicWindow(cluster, namespace, end, load, samples=draw(st.integers(1, 3)))


def unique(ws: list[TopicWindow]) -> list[TopicWindow]:
    """One row per (cluster, topic, window end), as Spark's aggregation gives."""
    return list({(w.cluster, w.load.topic, w.window_end_ms): w for w in ws}.values())


layouts_st = st.lists(st.integers(1, 0xFFFFFFFE), max_size=6, unique=True).map(
    lambda inner: tuple(sorted({0, 0xFFFFFFFF, *inner}))
)


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(windows(), max_size=30).map(unique),
    batch=st.lists(windows(), max_size=40).map(unique),
    boundaries=st.lists(layouts_st, min_size=3, max_size=3),
    known_total=st.one_of(st.none(), st.integers(0, 100)),
    want_every=st.integers(1, 3),
)
def test_columnar_roll_up_equals_the_reference(
    history: list[TopicWindow],
    batch: list[TopicWindow],
    boundaries: list[tuple[int, ...]],
    known_total: int | None,
    want_every: int,
) -> None:
    layouts = {
        key: NamespaceBundles(key[1], b) for key, b in zip(NAMESPACES, boundaries, strict=True)
    }
    namespace_known = {key: known_total for key in NAMESPACES}
    ttl_ms = 150_000
    # Reference: what BatchProcessor did with plain objects.
    seen = SeenTopics(ttl_ms)
    known = KnownTopics(ttl_ms)
    for step in (history, batch):
        seen.observe(step)
        known.observe(windows_table(step))
    newest_end = max((w.window_end_ms for w in batch), default=0)
    newest = [w for w in batch if w.window_end_ms == newest_end]
    want = roll_up_window(
        newest, window_end_ms=newest_end, layouts=layouts, seen=seen,
        namespace_known=namespace_known,
    )  # fmt: skip

    def wants(bundle: BundleLoad) -> bool:
        return bundle.bundle.lower % want_every == 0

    got = roll_up_newest(
        NewestWindow.of(windows_table(batch)), layouts=layouts, known=known,
        namespace_known=namespace_known, wants_topics=wants,
    )  # fmt: skip
    assert got == want  # every field but topics (compare=False), floats exactly
    for g, w in zip(got, want, strict=True):
        assert g.topics == (w.topics if wants(replace(w, topics=())) else ())


def test_known_topics_expire_after_the_ttl_and_keep_the_newest_end() -> None:
    def w(topic: str, end: int) -> TopicWindow:
        name = f"persistent://t/a/{topic}"
        return TopicWindow("c1", "t/a", end, TopicLoad(name, hash_position(name)))

    known = KnownTopics(ttl_ms=120_000)
    known.observe(windows_table([w("x", END - 180_000), w("y", END - 180_000)]))
    known.observe(windows_table([w("x", END)]))
    assert len(known) == 2
    known.expire(END)  # y was last seen 180 s ago: gone; x was refreshed
    assert known.positions("c1", "t/a").tolist() == [hash_position("persistent://t/a/x")]
    assert known.positions("c2", "t/a").size == 0


def test_bundle_index_matches_find_including_the_top_of_the_range() -> None:
    layout = NamespaceBundles("t/a", (0, 0x40000000, 0x80000000, 0xFFFFFFFF))
    positions = [0, 1, 0x3FFFFFFF, 0x40000000, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
    got = bundle_index(layout, np.array(positions, dtype=np.int64)).tolist()
    want = [layout.bundles.index(layout.find(p)) for p in positions]
    assert got == want == [0, 0, 0, 1, 2, 2, 2]


def test_large_topics_are_picked_from_the_newest_window_only() -> None:
    def w(topic: str, end: int, storage: int) -> TopicWindow:
        name = f"persistent://t/a/{topic}"
        load = TopicLoad(name, hash_position(name), storage_size=storage)
        return TopicWindow("c1", "t/a", end, load)

    table = windows_table([w("big", END, 10), w("small", END, 9), w("old", END - 60_000, 99)])
    large = NewestWindow.of(table).large_topics(10)
    assert [(c, t.topic, t.storage_size) for c, t in large] == [("c1", "persistent://t/a/big", 10)]
    assert NewestWindow.of(table.slice(0, 0)).window_end_ms == 0
    assert isinstance(table, pa.Table)
