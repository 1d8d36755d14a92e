"""Pulsar's four split algorithms: the same boundaries Pulsar computes, quirks included."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.core.bundles import BundleRange
from balancer.core.hashing import FULL_UPPER
from balancer.core.limits import BundleLimits
from balancer.core.load import TopicLoad
from balancer.core.split import (
    SplitAlgorithm,
    SplitError,
    SplitOptions,
    compute_split,
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    topic_count_equally_divide,
)

FULL = BundleRange.full()
SECOND = BundleRange(0x40000000, 0x80000000)
MIB = 1024 * 1024


def topic(position: int, rate: float = 0.0, throughput: float = 0.0, name: str = "") -> TopicLoad:
    return TopicLoad(
        name or f"persistent://t/ns/x{position}",
        position,
        msg_rate_in=rate,
        msg_throughput_in=throughput,
    )


# --- range_equally_divide -----------------------------------------------------------------

RANGE = [
    ("full", FULL, (0x7FFFFFFF,)),  # the contract's example
    ("second-quarter", SECOND, (0x60000000,)),
    ("width-2", BundleRange(10, 12), (11,)),
    ("width-3", BundleRange(10, 13), (11,)),
]


@pytest.mark.parametrize(("bundle", "expected"), [r[1:] for r in RANGE], ids=[r[0] for r in RANGE])
def test_range_equally_divide(bundle: BundleRange, expected: tuple[int, ...]) -> None:
    assert range_equally_divide(bundle) == expected
    # It ignores topics: an empty bundle splits the same way.
    assert compute_split(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, bundle, []).boundaries == expected


def test_a_bundle_of_width_one_is_never_split() -> None:
    for algorithm in SplitAlgorithm:
        result = compute_split(
            algorithm,
            BundleRange(5, 6),
            [topic(5, 1e9), topic(5, 1e9)],
            SplitOptions(positions=(5,)),
        )
        assert result.boundaries == ()
        assert [c.bundle for c in result.children] == [BundleRange(5, 6)]


# --- topic_count_equally_divide ----------------------------------------------------------

TOPIC_COUNT = [
    ("no-topics", [], ()),
    ("one-topic", [10], ()),
    ("two", [10, 21], (15,)),  # s = h[0], e = h[1]
    ("three", [10, 20, 30], (15,)),  # s = h[max(3/2 - 1, 0)] = h[0], e = h[1]
    ("four", [40, 10, 30, 20], (25,)),  # sorted: s = h[1] = 20, e = h[2] = 30
    ("five", [10, 20, 30, 40, 50], (25,)),  # s = h[1], e = h[2]
    ("same-hash", [10, 10, 10, 90], (10,)),  # s = e = 10: no +1, unlike flow_or_qps
    ("outside-ignored", [10, 21, 0x50000000], (15,)),
]


@pytest.mark.parametrize(
    ("hashes", "expected"), [t[1:] for t in TOPIC_COUNT], ids=[t[0] for t in TOPIC_COUNT]
)
def test_topic_count_equally_divide(hashes: list[int], expected: tuple[int, ...]) -> None:
    bundle = BundleRange(0, 0x40000000)
    topics = [topic(h, name=f"persistent://t/ns/{i}") for i, h in enumerate(hashes)]
    assert topic_count_equally_divide(bundle, topics) == expected


def test_topic_count_midpoint_on_the_lower_bound_is_rejected_like_pulsar() -> None:
    # Two topics at lower and lower + 1: the midpoint is the lower bound itself.
    bundle = BundleRange(100, 200)
    topics = [topic(100), topic(101)]
    assert topic_count_equally_divide(bundle, topics) == (100,)
    with pytest.raises(SplitError, match="Pulsar would reject"):
        compute_split(SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, bundle, topics)


# --- specified_positions_divide (PIP-143) ----------------------------------------------------

TWO_TOPICS = [topic(0x41000000), topic(0x42000000)]
SPECIFIED = [
    (
        "sorted-and-filtered",
        (0x70000000, 0x10000000, 0x50000000, 0x80000000),
        TWO_TOPICS,
        False,
        (0x50000000, 0x70000000),
    ),
    ("bounds-excluded", (0x40000000, 0x80000000), TWO_TOPICS, False, ()),
    ("none-inside", (0x90000000,), TWO_TOPICS, False, ()),
    ("one-topic", (0x50000000,), TWO_TOPICS[:1], False, ()),
    ("one-topic-forced", (0x50000000,), TWO_TOPICS[:1], True, (0x50000000,)),
    ("no-topics-forced", (0x50000000,), [], True, (0x50000000,)),
]


@pytest.mark.parametrize(
    ("positions", "topics", "force", "expected"),
    [s[1:] for s in SPECIFIED],
    ids=[s[0] for s in SPECIFIED],
)
def test_specified_positions_divide(
    positions: tuple[int, ...], topics: list[TopicLoad], force: bool, expected: tuple[int, ...]
) -> None:
    options = SplitOptions(positions=positions, force=force)
    assert specified_positions_divide(SECOND, topics, options) == expected


def test_specified_positions_must_not_be_empty() -> None:
    with pytest.raises(SplitError, match="SplitBoundaries can't be empty"):
        specified_positions_divide(SECOND, TWO_TOPICS, SplitOptions())
    with pytest.raises(SplitError, match="SplitBoundaries can't be empty"):
        compute_split(SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE, SECOND, TWO_TOPICS)


# --- flow_or_qps_equally_divide --------------------------------------------------------------

SMALL = SplitOptions(max_msg_rate=100, max_bandwidth_mbytes=1)
FLOW = [
    ("greedy-one-pass", [topic(100, 60), topic(200, 60), topic(300, 60)], (151, 251)),
    ("under-margin", [topic(100, 60), topic(200, 49)], ()),  # 109 < 100 * 1.1
    # 100 * (1 + 0.1) is 110.00000000000001 in doubles, in Java as here: 110 is still under.
    ("at-margin", [topic(100, 60), topic(200, 50)], ()),
    ("over-margin", [topic(100, 60), topic(200, 51)], (151,)),
    ("bytes-over", [topic(100, 0, 0.6 * MIB), topic(200, 0, 0.6 * MIB)], (151,)),
    ("one-active", [topic(100, 200), topic(200, 0, 0)], ()),
    ("idle-skipped", [topic(100, 60), topic(150), topic(200, 60)], (151,)),
    ("bytes-only-is-active", [topic(100, 100), topic(150, 0, 1), topic(200, 60)], (176,)),
    ("over-alone", [topic(100, 150), topic(200, 1), topic(300, 1)], (151,)),
    ("odd-gap", [topic(100, 60), topic(103, 60)], (102,)),  # 100 + 3 // 2 + 1
    ("adjacent", [topic(100, 60), topic(101, 60)], (101,)),  # the +1 lands on the next hash
    # Loads are kept per hash, the last topic of a hash winning: X (95) is read as Y's 5,
    # so the run never exceeds 100 and Pulsar finds no boundary.
    ("same-hash-map", [topic(100, 95, name="x"), topic(100, 5, name="y"), topic(300, 90)], ()),
    # Two topics but one distinct hash: fewer than 2 active entries.
    ("same-hash-only", [topic(100, 95, name="x"), topic(100, 95, name="y")], ()),
]


@pytest.mark.parametrize(("topics", "expected"), [f[1:] for f in FLOW], ids=[f[0] for f in FLOW])
def test_flow_or_qps_equally_divide(topics: list[TopicLoad], expected: tuple[int, ...]) -> None:
    assert flow_or_qps_equally_divide(FULL, topics, SMALL) == expected


def test_flow_or_qps_defaults_are_pulsars() -> None:
    topics = [topic(100, 20000), topic(200, 20000)]  # 40000 >= 30000 * 1.1
    assert flow_or_qps_equally_divide(FULL, topics) == (151,)
    assert flow_or_qps_equally_divide(FULL, [*topics[:1], topic(200, 10000)]) == ()


def test_flow_or_qps_repeated_boundaries_are_rejected_like_pulsar() -> None:
    topics = [topic(100, 60, name=n) for n in "abc"] + [topic(500, 60)]
    assert flow_or_qps_equally_divide(FULL, topics, SMALL) == (101, 101, 301)
    with pytest.raises(SplitError, match="repeated boundaries"):
        compute_split(SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE, FULL, topics, SMALL)


def test_flow_or_qps_boundary_on_the_closed_upper_end_is_rejected_like_pulsar() -> None:
    topics = [topic(FULL_UPPER - 1, 60), topic(FULL_UPPER, 60)]
    assert flow_or_qps_equally_divide(FULL, topics, SMALL) == (FULL_UPPER,)
    with pytest.raises(SplitError, match="outside bundle"):
        compute_split(SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE, FULL, topics, SMALL)


def test_topics_outside_the_bundle_are_ignored() -> None:
    inside = [topic(0x41000000, 60), topic(0x42000000, 60)]
    outside = [topic(0x10, 1e6), topic(0x90000000, 1e6)]
    for algorithm in (
        SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE,
        SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE,
    ):
        alone = compute_split(algorithm, SECOND, inside, SMALL)
        mixed = compute_split(algorithm, SECOND, inside + outside, SMALL)
        assert alone == mixed
        assert sum(c.topics for c in mixed.children) == 2


def test_children_carry_their_loads() -> None:
    topics = [topic(100, 60, 10), topic(200, 60, 20), topic(300, 60, 30)]
    result = compute_split(SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE, FULL, topics, SMALL)
    assert [(c.topics, c.msg_rate, c.throughput_bytes) for c in result.children] == [
        (1, 60.0, 10.0),
        (1, 60.0, 20.0),
        (1, 60.0, 30.0),
    ]
    assert [str(c.bundle) for c in result.children] == [
        "0x00000000_0x00000097",
        "0x00000097_0x000000fb",
        "0x000000fb_0xffffffff",
    ]


def test_no_split_returns_the_parent_as_only_child() -> None:
    result = compute_split(
        SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, SECOND, [topic(0x41000000, 5)]
    )
    assert result.boundaries == () and not result.is_split
    assert len(result.children) == 1
    assert result.children[0].bundle == SECOND and result.children[0].msg_rate == 5.0


OPTION_ERRORS = [
    ({"max_msg_rate": 0}, "max_msg_rate"),
    ({"max_bandwidth_mbytes": -1}, "max_bandwidth_mbytes"),
    ({"max_topics": 0}, "max_topics"),
    ({"fill_factor": 0}, "fill_factor"),
    ({"fill_factor": 1.5}, "fill_factor"),
    ({"fill_factor": float("nan")}, "fill_factor"),
    ({"difference_threshold_pct": -1}, "difference_threshold_pct"),
    ({"max_children": 0}, "max_children"),
    ({"max_children": True}, "max_children"),
]


@pytest.mark.parametrize(
    ("changes", "field"), OPTION_ERRORS, ids=[f"{c}" for c, _ in OPTION_ERRORS]
)
def test_invalid_options(changes: dict[str, float], field: str) -> None:
    with pytest.raises(SplitError, match=field):
        SplitOptions(**changes)  # type: ignore[arg-type]


def test_defaults_are_pulsars() -> None:
    o = SplitOptions()
    assert (o.max_msg_rate, o.max_bandwidth_mbytes, o.max_topics, o.max_sessions) == (
        30000,
        100,
        1000,
        1000,
    )
    assert (o.difference_threshold_pct, o.fill_factor, o.max_bandwidth_bytes) == (
        10,
        0.8,
        100 * MIB,
    )


def test_options_carry_a_namespaces_limits_and_pulsars_knobs() -> None:
    limits = BundleLimits(max_topics=7, max_sessions=0, max_msg_rate=5.0, max_bandwidth_mbytes=2.0)
    o = SplitOptions.from_limits(limits)
    assert o.limits == limits
    assert o.max_bandwidth_bytes == 2 * MIB
    assert (o.difference_threshold_pct, o.fill_factor, o.max_children) == (10, 0.8, None)


# --- properties shared by every algorithm ----------------------------------------------------

BUNDLES = st.sampled_from(
    [FULL, SECOND, BundleRange(0xC0000000, FULL_UPPER), BundleRange(1000, 1064), BundleRange(7, 9)]
)


@st.composite
def bundle_and_topics(draw: st.DrawFn) -> tuple[BundleRange, list[TopicLoad]]:
    bundle = draw(BUNDLES)
    edges = [bundle.lower, bundle.lower + 1, bundle.upper - 1, bundle.upper]
    position = st.sampled_from(edges) | st.integers(max(0, bundle.lower - 5), bundle.upper)
    rows = draw(
        st.lists(
            st.tuples(position, st.integers(0, 150), st.integers(0, 2 * MIB), st.integers(0, 4)),
            max_size=12,
        )
    )
    topics = [
        TopicLoad(f"t{i}", p, msg_rate_in=r, msg_throughput_in=b, producer_count=s)
        for i, (p, r, b, s) in enumerate(rows)
    ]
    return bundle, topics


@settings(max_examples=150, deadline=None)
@given(
    data=bundle_and_topics(),
    algorithm=st.sampled_from(list(SplitAlgorithm)),
    positions=st.lists(st.integers(0, FULL_UPPER), min_size=1, max_size=4),
)
def test_every_result_covers_the_parent(
    data: tuple[BundleRange, list[TopicLoad]], algorithm: SplitAlgorithm, positions: list[int]
) -> None:
    bundle, topics = data
    options = SplitOptions(
        max_msg_rate=100,
        max_bandwidth_mbytes=1,
        max_topics=5,
        max_sessions=10,
        positions=tuple(positions),
    )
    try:
        result = compute_split(algorithm, bundle, topics, options)
    except SplitError as exc:
        # Only a raw Pulsar result Pulsar itself would reject may fail.
        assert algorithm is not SplitAlgorithm.BALANCED_FLOW_DIVIDE
        assert "Pulsar would reject" in str(exc)
        return
    assert_valid_split(result.bundle, result.boundaries, [c.bundle for c in result.children])
    inside = [t for t in topics if bundle.contains(t.position)]
    assert sum(c.topics for c in result.children) == len(inside)
    for t in inside:
        assert sum(c.bundle.contains(t.position) for c in result.children) == 1


def assert_valid_split(
    bundle: BundleRange, boundaries: tuple[int, ...], children: list[BundleRange]
) -> None:
    assert all(bundle.strictly_inside(b) for b in boundaries)
    assert list(boundaries) == sorted(set(boundaries))
    assert len(children) == len(boundaries) + 1
    assert children[0].lower == bundle.lower and children[-1].upper == bundle.upper
    assert all(a.upper == b.lower for a, b in itertools.pairwise(children))
