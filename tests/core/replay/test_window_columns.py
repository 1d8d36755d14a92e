"""The replay window as columns: a namespace's topics held as position-sorted numpy columns,
its bundles rolled up by exact sums over a slice, bit for bit what `roll_up` gives over the
same topics; topic objects built only for the bundle asked for."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import FULL_UPPER, BundleRange, NamespaceBundles
from balancer.core.load import BundleLoad, TopicLoad, roll_up
from balancer.core.replay.window import (
    LOAD_COLUMNS,
    NamespaceWindow,
    ReplayWindow,
    WindowTopic,
)

NS = "t/ns"
END_MS = 120_000


def columns_of(
    topics: Sequence[TopicLoad], brokers: Sequence[str] | None = None
) -> NamespaceWindow:
    """The namespace as the stream's sorted rows give it: columns, no topic objects."""
    order = sorted(range(len(topics)), key=lambda i: (topics[i].position, topics[i].topic))
    ts = [topics[i] for i in order]
    return NamespaceWindow.of_columns(
        "c",
        NS,
        names=[t.topic for t in ts],
        positions=np.array([t.position for t in ts], dtype=np.int64),
        columns={
            name: np.array(
                [getattr(t, name) for t in ts],
                dtype=np.float64 if name.startswith("msg_") else np.int64,
            )
            for name in LOAD_COLUMNS
        },
        brokers=[brokers[i] for i in order] if brokers else ["b1:8080"] * len(ts),
    )


def expected(topics: Sequence[TopicLoad], bundle: BundleRange) -> BundleLoad | None:
    """`roll_up` over the topics of `bundle`, in position order (as the window held them)."""
    inside = tuple(
        sorted((t for t in topics if bundle.contains(t.position)), key=lambda t: t.position)
    )
    if not inside:
        return None
    return roll_up(cluster="c", namespace=NS, bundle=bundle, window_end_ms=END_MS, topics=inside)


def bits(load: BundleLoad | None) -> tuple[object, ...] | None:
    """Every field but the topics, floats by their bits (0.0 and -0.0 differ, NaN equals)."""
    if load is None:
        return None
    return tuple(
        v.hex() if isinstance(v, float) else v
        for f in dataclasses.fields(load)
        if f.name != "topics"
        for v in [getattr(load, f.name)]
    )


def window_of(nsw: NamespaceWindow) -> ReplayWindow:
    return ReplayWindow(END_MS, {(nsw.cluster, nsw.namespace): nsw}, {})


# Rates that make plain float addition order-dependent: tiny and huge magnitudes, cancelling
# signs, subnormals; the exact-sum rule gives one answer whatever the order.
rates = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-320, 0.1, 1e16, -1e16, 2.0**-1074]),
)
positions = st.one_of(
    st.integers(0, FULL_UPPER), st.sampled_from([0, 1, 0x40000000, 0x80000000, FULL_UPPER])
)
counts = st.integers(0, 2**40)


@st.composite
def topic_loads(
    draw: st.DrawFn, count_values: st.SearchStrategy[int] = counts, max_topics: int = 30
) -> list[TopicLoad]:
    n = draw(st.integers(0, max_topics))
    return [
        TopicLoad(
            f"persistent://{NS}/t{i}",
            draw(positions),
            *(draw(rates) for _ in range(4)),
            *(draw(count_values) for _ in range(5)),
        )
        for i in range(n)
    ]


@st.composite
def layouts(draw: st.DrawFn) -> NamespaceBundles:
    inner = draw(st.lists(st.integers(1, FULL_UPPER - 1), max_size=6, unique=True))
    return NamespaceBundles(NS, (0, *sorted(inner), FULL_UPPER))


@settings(max_examples=200, deadline=None)
@given(topic_loads(), layouts())
def test_a_bundle_rolls_up_bit_for_bit_as_roll_up_does(
    topics: list[TopicLoad], layout: NamespaceBundles
) -> None:
    window = window_of(columns_of(topics))
    for bundle in layout.bundles:
        assert bits(window.bundle_load("c", NS, bundle)) == bits(expected(topics, bundle))


def test_the_last_bundle_holds_0xffffffff_an_empty_bundle_is_none_one_topic_namespaces() -> None:
    edge = TopicLoad(f"persistent://{NS}/edge", FULL_UPPER, 3.0, 0.1, 7.5, 0.2, 1, 2, 3, 4, 5)
    low = TopicLoad(f"persistent://{NS}/low", 0, 2.0, 0.3, 1.5, 0.7, 2, 1, 0, 0, 0)
    both = [edge, low]
    window = window_of(columns_of(both))
    last = BundleRange(0x80000000, FULL_UPPER)
    first = BundleRange(0, 0x80000000)
    empty = BundleRange(1, 0x80000000)
    for bundle in (last, first):
        load = window.bundle_load("c", NS, bundle)
        assert load is not None and bits(load) == bits(expected(both, bundle))
        assert load.topic_count == 1
    assert window.bundle_load("c", NS, empty) is None
    assert window.bundle_load("c", NS, last) is window.bundle_load("c", NS, last)  # once
    # A bundle ending at 0xffffffff that is not the last does not hold it: none is, so a
    # namespace of one topic at 0xffffffff rolls up into its whole-range bundle.
    alone = window_of(columns_of([edge]))
    whole = BundleRange(0, FULL_UPPER)
    assert bits(alone.bundle_load("c", NS, whole)) == bits(expected([edge], whole))
    assert alone.bundle_load("c", NS, first) is None
    assert alone.bundle_load("c", "t/other", whole) is None  # no such namespace


def test_topic_objects_are_built_for_the_bundle_asked_for_with_their_brokers() -> None:
    topics = [
        TopicLoad(f"persistent://{NS}/t{i}", p, float(i), 0.0, 0.0, 0.0, 1, i, 0, 0, 0)
        for i, p in enumerate([5, 0x7FFFFFFF, 0x80000000, 3, FULL_UPPER, 0x80000000])
    ]
    brokers = ["a", "b", "c", "d", "e", "f"]
    nsw = columns_of(topics, brokers)
    last = BundleRange(0x80000000, FULL_UPPER)
    got = nsw.in_bundle(last)
    want = sorted(
        (
            WindowTopic("c", t, b)
            for t, b in zip(topics, brokers, strict=True)
            if last.contains(t.position)
        ),
        key=lambda w: (w.load.position, w.load.topic),
    )
    assert got == tuple(want)
    # Python values, as the stream's rows decoded would give them.
    types = [str, int, float, float, float, float, int, int, int, int, int]
    assert [type(v) for v in dataclasses.astuple(got[0].load)] == types
    assert len(nsw) == 6 and nsw.topics == tuple(
        sorted(
            (WindowTopic("c", t, b) for t, b in zip(topics, brokers, strict=True)),
            key=lambda w: (w.load.position, w.load.topic),
        )
    )
    window = window_of(nsw)
    assert window.topic_loads_in("c", NS, last) == tuple(w.load for w in want)
    assert window.topic_loads_in("c", "t/none", last) == ()


def test_a_window_from_columns_equals_one_from_topic_objects() -> None:
    topics = [
        TopicLoad(f"persistent://{NS}/t{i}", (i * 0x12345677) % (FULL_UPPER + 1), 1.0 + i)
        for i in range(50)
    ]
    from_objects = ReplayWindow.build(END_MS, [WindowTopic("c", t, "b1:8080") for t in topics], {})
    assert from_objects.namespaces[("c", NS)] == columns_of(topics)
    other = columns_of([dataclasses.replace(topics[0], msg_rate_in=9.0), *topics[1:]])
    assert from_objects.namespaces[("c", NS)] != other


def test_columns_out_of_position_order_or_of_unequal_lengths_are_refused() -> None:
    good = {
        name: np.zeros(2, dtype=np.float64 if name.startswith("msg_") else np.int64)
        for name in LOAD_COLUMNS
    }
    with pytest.raises(ValueError, match="sorted by position"):
        NamespaceWindow.of_columns(
            "c", NS, names=["a", "b"], positions=np.array([5, 4]), columns=good,
            brokers=["x", "x"],
        )  # fmt: skip
    with pytest.raises(ValueError, match="length"):
        NamespaceWindow.of_columns(
            "c", NS, names=["a"], positions=np.array([4, 5]), columns=good, brokers=["x", "x"]
        )
    with pytest.raises(ValueError, match="columns"):
        NamespaceWindow.of_columns(
            "c", NS, names=["a", "b"], positions=np.array([4, 5]),
            columns={k: v for k, v in good.items() if k != "backlog_size"}, brokers=["x", "x"],
        )  # fmt: skip


huge_counts = st.one_of(counts, st.sampled_from([2**62, 2**63 - 1]))


# Topics whose counts may add up past int64 (Python ints do not overflow).
@given(st.one_of(topic_loads(), topic_loads(huge_counts, max_topics=12)), layouts())
def test_a_namespace_rolls_up_at_once_bit_for_bit_as_each_bundle_does(
    topics: list[TopicLoad], layout: NamespaceBundles
) -> None:
    # The vectorised path (every bundle of a layout in one pass) against the per-bundle one
    # and `roll_up` itself.
    all_at_once = window_of(columns_of(topics)).namespace_loads("c", NS, layout)
    one_by_one = window_of(columns_of(topics))
    assert len(all_at_once) == layout.num_bundles
    for bundle, load in zip(layout.bundles, all_at_once, strict=True):
        assert bits(load) == bits(one_by_one.bundle_load("c", NS, bundle))
        assert bits(load) == bits(expected(topics, bundle))


def test_a_namespace_with_infinite_or_nan_rates_rolls_up_as_roll_up_does() -> None:
    # math.fsum's own answer for inf and nan, as roll_up gives it.
    inf = TopicLoad(f"persistent://{NS}/inf", 5, float("inf"), 1.0, 2.0, 3.0, 1, 1, 0, 0, 0)
    nan = TopicLoad(
        f"persistent://{NS}/nan", 0x90000000, 1.0, float("nan"), 2.0, 3.0, 1, 1, 0, 0, 0
    )
    plain = TopicLoad(f"persistent://{NS}/p", 0x20000000, 0.1, 0.2, 0.3, 0.4, 2, 3, 0, 0, 0)
    topics = [inf, nan, plain]
    layout = NamespaceBundles(NS, (0, 0x10000000, 0x80000000, FULL_UPPER))
    loads = window_of(columns_of(topics)).namespace_loads("c", NS, layout)
    assert [bits(x) for x in loads] == [bits(expected(topics, b)) for b in layout.bundles]
    assert loads[0] is not None and loads[0].msg_rate_in == float("inf")
    assert loads[2] is not None and np.isnan(loads[2].msg_rate_out)


def test_a_namespace_absent_from_the_window_has_no_load_in_any_bundle_and_is_rolled_once() -> None:
    topic = TopicLoad(f"persistent://{NS}/a", 7, 1.0, 2.0, 3.0, 4.0, 1, 1, 0, 0, 0)
    window = window_of(columns_of([topic]))
    layout = NamespaceBundles(NS, (0, 0x80000000, FULL_UPPER))
    assert window.namespace_loads("c", "t/other", layout) == (None, None)
    first = window.namespace_loads("c", NS, layout)
    assert first[1] is None and first[0] is not None and first[0].topic_count == 1
    assert window.namespace_loads("c", NS, layout) is first  # once per window and layout


@settings(max_examples=100, deadline=None)
@given(topic_loads(), topic_loads(), layouts(), layouts())
def test_every_namespace_and_layout_rolled_up_in_one_pass_is_each_bundle_s_roll_up(
    first: list[TopicLoad], second: list[TopicLoad], one: NamespaceBundles, other: NamespaceBundles
) -> None:
    # One pass over several namespaces' columns end to end, a namespace under two layouts
    # (two policies' splits) and one the window lacks: each bundle as if rolled up alone.
    a = columns_of(first)
    b = dataclasses.replace(columns_of(second), namespace="t/two")
    together = ReplayWindow(END_MS, {("c", NS): a, ("c", "t/two"): b}, {})
    alone = ReplayWindow(END_MS, {("c", NS): a, ("c", "t/two"): b}, {})
    two = NamespaceBundles("t/two", other.boundaries)
    wanted = [("c", NS, one), ("c", "t/two", two), ("c", NS, other), ("c", "t/none", one)]
    together.roll_up_all(wanted)
    for cluster, namespace, layout in wanted:
        loads = together.namespace_loads(cluster, namespace, layout)
        for bundle, load in zip(layout.bundles, loads, strict=True):
            assert bits(load) == bits(alone.bundle_load(cluster, namespace, bundle))
