"""Per-bundle roll-up of one window (pure): sums, layouts, splits and completeness."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import NamespaceBundles
from balancer.core.hashing import hash_position
from balancer.core.load import TopicLoad
from tests.streaming.rollup_reference import SeenTopics, TopicWindow, newest_window, roll_up_window

NS = "t/ns"
END = 1_700_000_100_000


def window(topic: str, *, end: int = END, rate: float = 1.0, sessions: int = 1) -> TopicWindow:
    name = f"persistent://{NS}/{topic}"
    load = TopicLoad(name, hash_position(name), rate, 2 * rate, 10 * rate, 0.0, sessions, 0)
    return TopicWindow("c1", NS, end, load)


def roll(windows: list[TopicWindow], layout: NamespaceBundles, known: int | None = None) -> dict:
    seen = SeenTopics(ttl_ms=10**9)
    seen.observe(windows)
    loads = roll_up_window(
        windows,
        window_end_ms=END,
        layouts={("c1", NS): layout},
        seen=seen,
        namespace_known={("c1", NS): known},
    )
    return {str(b.bundle): b for b in loads}


@settings(max_examples=50)
@given(
    rates=st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=60),
    bundles=st.integers(min_value=1, max_value=16),
)
def test_bundle_sums_equal_a_plain_grouping(rates: list[float], bundles: int) -> None:
    layout = NamespaceBundles.initial(NS, bundles)
    windows = [window(f"x{i}", rate=r, sessions=i % 3) for i, r in enumerate(rates)]
    want: dict[str, list[TopicWindow]] = defaultdict(list)
    for w in windows:
        want[str(layout.find(w.load.position))].append(w)
    got = roll(windows, layout)
    assert set(got) == set(want)
    for bundle, ws in want.items():
        b = got[bundle]
        assert b.msg_rate_in == pytest.approx(sum(w.load.msg_rate_in for w in ws))
        assert b.msg_throughput_in == pytest.approx(sum(w.load.msg_throughput_in for w in ws))
        assert b.topic_count == len(ws) and b.session_count == sum(w.load.sessions for w in ws)
        assert b.window_end_ms == END and b.completeness == 1.0
        assert [t.position for t in b.topics] == sorted(t.position for t in b.topics)


def test_a_split_layout_maps_the_same_topics_to_the_children() -> None:
    windows = [window(f"x{i}") for i in range(40)]
    initial = NamespaceBundles.initial(NS, 4)
    parent = initial.bundles[1]
    split, children = initial.split(parent, [parent.lower + parent.width // 3])
    before, after = roll(windows, initial), roll(windows, split)
    assert str(parent) in before and str(parent) not in after
    assert sum(after[str(c)].topic_count for c in children if str(c) in after) == (
        before[str(parent)].topic_count
    )


def test_other_windows_are_left_out() -> None:
    layout = NamespaceBundles.initial(NS, 1)
    got = roll([window("a"), window("b", end=END - 60_000)], layout)
    assert [b.topic_count for b in got.values()] == [1]


def test_completeness_counts_topics_seen_recently_but_silent_now() -> None:
    layout = NamespaceBundles.initial(NS, 1)
    seen = SeenTopics(ttl_ms=300_000)
    seen.observe([window("a", end=END - 60_000), window("b", end=END - 60_000)])
    now = [window("a")]
    seen.observe(now)
    (load,) = roll_up_window(
        now, window_end_ms=END, layouts={("c1", NS): layout}, seen=seen, namespace_known={}
    )
    assert (load.reported_topics, load.known_topics, load.completeness) == (1, 2, 0.5)
    seen.expire(END + 250_000)  # "b" silent for longer than the TTL: no longer known
    assert seen.positions("c1", NS) == [window("a").load.position]


def test_a_larger_namespace_total_scales_known_topics_up() -> None:
    layout = NamespaceBundles.initial(NS, 1)
    (load,) = roll([window("a"), window("b")], layout, known=8).values()
    assert (load.known_topics, load.completeness) == (8, 0.25)


def test_newest_window_of_nothing_is_zero() -> None:
    assert newest_window([]) == 0
    assert newest_window([window("a"), window("b", end=END + 60_000)]) == END + 60_000
